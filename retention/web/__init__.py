"""The sidecar's HTTP face: the waitress server (`server`), the endpoint table (`routes`), the JSON
views (`views`) and the status page (`page`, `static/status.html`). It may import
`retention.scheduling` (what it serves) and `policies`; the scheduler never imports it.
"""
