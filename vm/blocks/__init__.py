"""Builders of hardcoded transformer layers, addressed by layout field names."""
