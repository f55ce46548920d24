"""A Spark standalone cluster on loopback: one master and separate worker processes, from the
classes the pyspark wheel carries, so that `streamjoin run` meets executors that are other
processes (other JVMs, other Python workers) as it does on a real cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from app.broker import free_port
from app.run.executor import spark_home
from ops.worker.forkserver import FORKSERVER

START_TIMEOUT_S = 90.0
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class StandaloneCluster:
    """`workers` workers of `cores` cores each; `url` is the master's `spark://` address."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 1, env: dict | None = None):
        self.work = work
        self.workers = workers
        self.cores = cores
        self.env = {
            **{k: v for k, v in os.environ.items() if k != FORKSERVER},  # the tests' session's
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(work / "logs"),
            **(env or {}),
        }
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen[bytes]] = []
        work.mkdir(parents=True, exist_ok=True)

    def _start(self, name: str, *args: str) -> None:
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        with (self.work / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._processes.append(process)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except OSError:
            return 0

    def __enter__(self) -> StandaloneCluster:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        for n in range(self.workers):
            self._start(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                "1g",
                "--webui-port",
                "0",
                "--work-dir",
                str(self.work / f"worker-{n}"),
                self.url,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise TimeoutError(f"{self.workers} workers did not register; see {self.work}")
            time.sleep(0.5)
        return self

    def executor_pids(self) -> list[int]:
        """The running executor JVMs this cluster's workers launched."""
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes()
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if EXECUTOR_CLASS.encode() in cmdline and cwd.startswith(str(self.work)):
                pids.append(int(proc.name))
        return pids

    def executors_that_ran_tasks(self) -> list[str]:
        """The executors (`worker-n/app/id`) whose log shows a task started."""
        return sorted(
            str(log.parent.relative_to(self.work))
            for log in self.work.glob("worker-*/app-*/*/stderr")
            if "Running task" in log.read_text(errors="replace")
        )

    def kill_executor(self) -> int:
        """SIGKILL one running executor's JVM, as a lost node does (its Python workers end
        with it); its worker then starts another."""
        pid = self.executor_pids()[0]
        os.kill(pid, signal.SIGKILL)
        return pid

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for process in reversed(self._processes):
            os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
