# One image for every component: `gpu-scheduler webhook|run|extender|certs ...`.
# Not built in CI (no container engine on the build machines); the Python package it installs is.
FROM python:3.11-slim AS build
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY webhook webhook
COPY scheduler_core scheduler_core
COPY certs certs
COPY gpu_scheduler gpu_scheduler
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin gpu-scheduler
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY examples /usr/local/share/gpu-scheduler/examples
USER 65532
ENTRYPOINT ["gpu-scheduler"]
CMD ["--help"]
