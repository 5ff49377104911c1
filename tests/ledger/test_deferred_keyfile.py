"""eth-keyfile (and its BLS12-381 tables) load only when a keystore is read or written
(ledger.deferred_keyfile), and keystores behave as they do with eth-keyfile imported eagerly."""

from __future__ import annotations

import json
import subprocess
import sys

PASSWORD = "correct horse"
KEY = "0x" + "4c" * 32


def _python(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_web3_after_ledger_loads_no_bls12_381_until_a_keystore_is_used(tmp_path):
    # eth-keyfile's own code, imported eagerly, writes the keystore ...
    eager = tmp_path / "eager.json"
    _python("import json, sys, eth_keyfile\n"
            f"ks = eth_keyfile.create_keyfile_json(bytes.fromhex({KEY[2:]!r}), {PASSWORD!r}.encode(),"
            " kdf='pbkdf2', iterations=8)\n"
            f"open({str(eager)!r}, 'w').write(json.dumps(ks))\n"
            "print(json.dumps({'eager': type(sys.modules['eth_keyfile']).__name__}))")
    # ... and a process that imported the ledger first reads it, and writes one of its own
    out = _python(
        "import json, sys\n"
        "import ledger, web3\n"
        "from eth_account import Account\n"
        "bls = lambda: sorted(m for m in sys.modules if m.startswith(('py_ecc.bls', "
        "'py_ecc.optimized_bls12_381')))\n"
        "before = bls()\n"
        f"key = Account.decrypt(json.load(open({str(eager)!r})), {PASSWORD!r})\n"
        f"mine = Account.encrypt(key, {PASSWORD!r}, kdf='pbkdf2', iterations=8)\n"
        "import eth_keyfile, eth_keyfile.keyfile as keyfile\n"
        "print(json.dumps({'before': before, 'after': bls(), 'key': '0x' + key.hex(),\n"
        "  'mine': mine, 'kdf': str(keyfile.KDFType), 'module': type(eth_keyfile).__name__}))")
    assert out["before"] == []                       # web3 and eth-account imported, no BLS
    assert out["after"] and out["key"] == KEY        # the real eth-keyfile read the keystore
    assert out["module"] == "module"                 # and replaced the stand-ins
    # the keystore written after the hand-over is eth-keyfile's own format
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(out["mine"]))
    again = _python("import json, eth_keyfile\n"
                    f"key = eth_keyfile.decode_keyfile_json(json.load(open({str(mine)!r})),"
                    f" {PASSWORD!r}.encode())\n"
                    "print(json.dumps({'key': '0x' + key.hex()}))")
    assert again["key"] == KEY


def test_the_stand_ins_carry_the_names_of_the_real_module():
    out = _python(
        "import json, ledger.deferred_keyfile as d\n"
        "import eth_keyfile.keyfile as real\n"   # ledger installed the stand-ins; this is one
        "assert d.installed()\n"
        "names = {n: hasattr(d.real_module(d.MODULE), n) for n in d.FUNCTIONS}\n"
        "print(json.dumps({'names': names, 'kdf': d.KDFType == d.real_module().KDFType,\n"
        "  'installed_after': d.installed()}))")
    assert all(out["names"].values()), out
    assert out["kdf"] is True                  # eth-account binds KDFType at import
    assert out["installed_after"] is False


def test_a_failed_import_leaves_the_stand_ins_in_place():
    out = _python(
        "import importlib, json\n"
        "import ledger.deferred_keyfile as d\n"
        "real_import, calls = importlib.import_module, []\n"
        "def failing(name, *args, **kwargs):\n"
        "    calls.append(name)\n"
        "    raise ImportError('disk went away')\n"
        "importlib.import_module = failing\n"
        "try:\n"
        "    import eth_keyfile; eth_keyfile.load_keyfile('nowhere')\n"
        "except ImportError as e:\n"
        "    error = str(e)\n"
        "still = d.installed()\n"
        "importlib.import_module = real_import\n"   # the next use imports it after all
        "print(json.dumps({'error': error, 'calls': calls, 'still': still,\n"
        "  'version': eth_keyfile.__version__, 'after': d.installed()}))")
    assert out["error"] == "disk went away" and out["calls"] == ["eth_keyfile.keyfile"]
    assert out["still"] is True
    assert out["version"] and out["after"] is False
