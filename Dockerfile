# kdra image: one entrypoint for `kdra operator` and `kdra agent`.
# Stage 1 builds a wheel and installs it with its pinned dependencies into a venv;
# stage 2 copies only that venv onto a slim base and runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/kdra
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/kdra/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/kdra/bin/pip install --no-cache-dir .

FROM python:3.11-slim
COPY --from=build /opt/kdra /opt/kdra
COPY crds /opt/kdra/share/crds
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin kdra
ENV PATH=/opt/kdra/bin:$PATH PYTHONUNBUFFERED=1
# The agent needs root on the node (CDI dir, state dir); its DaemonSet sets runAsUser: 0.
USER 65532
ENTRYPOINT ["kdra"]
CMD ["--help"]
