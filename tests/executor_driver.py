"""A driver whose only executor is `streamjoin executor`, run as Spark on Kubernetes runs an
executor pod (`python -m tests.executor_driver MASTER`): prints what a Python job computed.

Its own process, since a test session holds one SparkContext and this needs another.
"""

from __future__ import annotations

import os
import subprocess
import sys

from pyspark.sql import SparkSession

from app.broker import free_port
from app.run.session import worker_python


def main(master: str) -> None:
    port = free_port()
    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=worker_python())
    spark = (
        SparkSession.builder.master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.port", str(port))
        .getOrCreate()
    )
    pod = {  # what Spark's executor pod builder sets (BasicExecutorFeatureStep)
        "PATH": os.environ["PATH"],
        "SPARK_EXECUTOR_ID": "7",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_APPLICATION_ID": spark.sparkContext.applicationId,
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_EXECUTOR_POD_NAME": "streamjoin-exec-7",
    }
    executor = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "executor"],
        env=pod,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        total = spark.sparkContext.parallelize(range(100), 4).map(lambda x: x * 2).sum()
        hosts = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
        print(f"sum={total} block-managers={hosts}")
    finally:
        spark.stop()
        executor.kill()


if __name__ == "__main__":
    main(sys.argv[1])
