# streamjoin: PySpark Structured Streaming on Debian bookworm, Python 3.11, a Java 17 runtime.
#
# BASE_IMAGE: a Debian bookworm image whose `python3` is 3.11 with its venv module. CI cannot
# pull images and builds one from Debian's packages with mmdebstrap (tests/container_image.py);
# it also passes a wheelhouse (`wheels/` beside this file in the build context) and
# PIP_NO_INDEX=1, since its build containers reach Debian's mirror but not PyPI.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_NO_INDEX
WORKDIR /src
# `wheel[s]` matches the optional wheelhouse (its files land in /src), nothing without one;
# `jar[s]`, the optional folder of the jars `app/jars` lists (its lists' folders land in /src).
COPY pyproject.toml README.md wheel[s] jar[s] ./
COPY app ./app
COPY serdes ./serdes
COPY state ./state
COPY ops ./ops
# The dependencies at the versions the tests ran (ops/image-constraints.txt), not the newest.
# The jars of s3a:// checkpoints in the image, checked against their pinned hashes (fetched
# from Maven Central when the context has none): nothing is fetched at start.
ENV STREAMJOIN_JARS=/opt/streamjoin/jars
RUN python3 -m venv /opt/streamjoin \
    && /opt/streamjoin/bin/pip install --no-cache-dir --disable-pip-version-check \
        --find-links /src --constraint ops/image-constraints.txt . \
    && mkdir -p "$STREAMJOIN_JARS" \
    && if [ -d s3a ]; then mv s3a "$STREAMJOIN_JARS/"; fi \
    && /opt/streamjoin/bin/python -m app.jars s3a \
    && find /opt/streamjoin -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
# The JVM (headless Java 17); `ps` (procps) for Spark's launch scripts; tini as PID 1, which
# forwards signals (SIGTERM drains the query) and reaps the Python workers Spark forks. Slim
# bases leave out man pages, and the JRE's post-install script fails without their folder.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless=17.* procps=2:4.* tini=0.19.* \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/streamjoin --create-home streamjoin
COPY --from=build /opt/streamjoin /opt/streamjoin

ENV PATH=/opt/streamjoin/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/streamjoin/bin/streamjoin-python \
    STREAMJOIN_JARS=/opt/streamjoin/jars \
    JVM_CLASS_ARCHIVE_DIR=/opt/streamjoin/jvm \
    CHECKPOINT_LOCATION=/var/lib/streamjoin/checkpoint
# The driver JVM's class archive, recorded by this image's Java and Spark: every container's
# start maps it (app/class_archive.py), none records one.
RUN python -m app.class_archive "$JVM_CLASS_ARCHIVE_DIR" \
    && find /opt/streamjoin -name __pycache__ -prune -exec rm -rf {} + \
    && rm -rf /tmp/* \
    && ls "$JVM_CLASS_ARCHIVE_DIR"/driver-*.jsa

# A read-only root filesystem needs only /tmp (Spark's scratch) and the checkpoint's volume.
USER 10001
WORKDIR /var/lib/streamjoin
EXPOSE 9464
ENTRYPOINT ["tini", "--", "streamjoin"]
CMD ["run"]
