# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for the pip bootstrap script that ansible-test downloads from its own file server.

That server is not reachable from our build machines (only package registries are), so the
Makefile puts this file where ansible-test caches the script. It does the same job with the
standard library's ``ensurepip`` and then installs the pip version ansible-test asks for from PyPI.
"""

from __future__ import annotations

import subprocess
import sys

# Options only the real bootstrap script understands.
ONLY_FOR_GET_PIP = {"--no-setuptools", "--no-wheel"}

# In a child process: ensurepip turns off pip's configuration for the process that runs it.
subprocess.check_call([sys.executable, "-m", "ensurepip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", *(a for a in sys.argv[1:] if a not in ONLY_FOR_GET_PIP)])
