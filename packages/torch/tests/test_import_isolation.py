import json
import subprocess
import sys


def test_core_and_plugin_entry_point_import_no_framework():
    code = ("import sys, json, trainkit, trainkit_torch._plugin, trainkit_torch\n"
            "from trainkit._internal.plugins import get_plugins\n"
            "plugins = get_plugins()\n"
            "print(json.dumps({'torch': 'torch' in sys.modules, 'status': plugins.infos['torch'].status,\n"
            "                  'backends': sorted(plugins.backends.entries)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    assert out == {"torch": False, "status": "loaded", "backends": ["torch"]}
