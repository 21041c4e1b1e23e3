"""Core shared by both tiers: settings, the Redis state store and the mirror document format."""
