"""Benchmarks: Ironic-style fleet provisioning (`bench.fleet`) and Redfish GET latency (`bench.api_latency`)."""
