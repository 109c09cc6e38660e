"""hostctl in the tools people already run (README "Watching the host"): one reading of the host
and its runtime (reading.py), shown live by `status --watch` (watch.py) and exported for
Prometheus by `hostctl metrics` (exposition.py: node_exporter's textfile collector, or a scrape
endpoint of its own). prometheus_client and rich's Live are imported by those paths only.
"""
