# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print this machine's effective pip settings as a pip.conf.

ansible-test runs pip with a scrubbed environment and, in our Makefile, a HOME of its own, so
settings a machine needs to reach PyPI (a CA bundle, an index mirror, ...) are carried over in
a pip.conf under that HOME. Usage: ``python pip_config.py > $HOME/.config/pip/pip.conf``.
"""

from __future__ import annotations

import configparser
import subprocess
import sys

out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
conf = configparser.ConfigParser(interpolation=None)
for line in out.stdout.splitlines():
    key, value = line.split("=", 1)
    section, name = key.rsplit(".", 1) if "." in key else ("", key)
    section = "global" if section in ("", ":env:") else section
    if not conf.has_section(section):
        conf.add_section(section)
    conf.set(section, name, value.strip().strip("'\""))
conf.write(sys.stdout)
