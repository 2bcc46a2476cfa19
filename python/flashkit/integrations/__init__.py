"""Integrations with other libraries; each module registers flashkit with one of them."""
