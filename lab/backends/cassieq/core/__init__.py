"""CassieQ's core: the algorithms of the original (monotons, buckets, pointers, compare-and-set)
over the store port, with time only through the Runtime."""
