"""Locust users for each design's wire protocol, and the listener that records samples."""
