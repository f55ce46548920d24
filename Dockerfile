# streamjoin: PySpark Structured Streaming on a slim Python base with a Java 17 runtime.
FROM python:3.11-slim-bookworm

# Spark's launch scripts need `ps` (procps); the JVM is the headless Java 17 runtime.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.* procps=2:4.* \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=/usr/local/bin/streamjoin-python \
    CHECKPOINT_LOCATION=/var/lib/streamjoin/checkpoint

WORKDIR /opt/streamjoin
COPY pyproject.toml README.md ./
COPY app ./app
COPY serdes ./serdes
COPY state ./state
COPY ops ./ops
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home-dir /var/lib/streamjoin --create-home streamjoin

USER 10001
WORKDIR /var/lib/streamjoin
EXPOSE 9464
ENTRYPOINT ["streamjoin"]
CMD ["run"]
