"""CassieQ's wire: its HTTP APIs (the queue API and the admin API) as routes on the sans-IO
HTTP server of ``lab.design.http``, and the OpenAPI document that describes them."""
