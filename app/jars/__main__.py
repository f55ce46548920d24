"""`python -m app.jars LIST...`: fetch those lists' jars now and check every one of them against
its pinned SHA-256, those already there included (the image's build does, on the jars its
context brings)."""

import hashlib
import sys

from app.jars import fetched, jar_home, pinned

for listed in sys.argv[1:]:
    jars = fetched(listed, listed)
    for jar, (_, sha256) in zip(jars, pinned(listed), strict=True):
        if hashlib.sha256(jar.read_bytes()).hexdigest() != sha256:
            sys.exit(f"{jar} does not have the SHA-256 {listed}.txt pins")
    print(f"{listed}: {len(jars)} jars in {jar_home() / listed}, as pinned")
