"""The sweep's config: its schema (validation, defaults) and the typed settings each stage gets."""
