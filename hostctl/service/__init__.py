"""The runtime service: rendering its Compose project and units, and (later) its lifecycle."""
