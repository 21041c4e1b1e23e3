"""Redfish resource blueprints, one module per resource family."""
