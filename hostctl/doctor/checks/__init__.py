"""Doctor checks, one module per area. Importing this package registers every check
(hostctl.doctor.registry.check); the registry's all_checks() does that on first use."""

from hostctl.doctor.checks import docker, gpu, logs, memory, model, service, storage, system  # noqa: F401
