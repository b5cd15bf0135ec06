"""`python -m commitlog.spark.jvm build`: compile the JVM reader's jar (what `make jar` runs)."""

import sys

from . import build

if sys.argv[1:] != ["build"]:
    sys.exit("usage: python -m commitlog.spark.jvm build")
print(build())
