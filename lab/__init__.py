"""The embedded lab: a KubeVirt simulator, an ISO server, an embedded Redis and a process stack."""
