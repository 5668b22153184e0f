"""Find or install the Prometheus server that the metrics' slow test scrapes a cluster with.

``packages/cli/tests/test_metrics.py::test_a_real_prometheus_scrapes_both_nodes``
(``nox -s learning``) runs Debian's ``prometheus`` against a two-node cluster's scrape
config. This tool prints its path when it is here, else installs the package with apt-get
when run as root, else fails saying what to install. The package's service is not started.

Usage::

    python3 tools/install_prometheus.py
"""

from __future__ import annotations

from apt_packages import main_for  # a sibling: tools/ is sys.path[0] for a script

PROGRAMS = {"prometheus": "prometheus"}
PACKAGES = ("prometheus",)
HINT = (
    "the metrics test scrapes with a real Prometheus: install it "
    "(Debian/Ubuntu: `sudo apt-get install prometheus`)"
)

if __name__ == "__main__":
    raise SystemExit(main_for(PROGRAMS, PACKAGES, HINT))
