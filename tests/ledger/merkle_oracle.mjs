// The oracle of tests/ledger/test_merkle_distribution.py: @openzeppelin/merkle-tree 1.0.8
// (package.json), the reference ledger/merkle_distribution.py must equal bit for bit.
//
// stdin: {"cases": [{"values": [[account, amount], ...],      built with StandardMerkleTree.of
//                    "respelt": [[account, amount], ...],     the same lines, other spellings
//                    "dump": {...}}]}                         a dump for StandardMerkleTree.load
// stdout: {"cases": [{"root", "proofs": [[hex, ...] per value], "dump": JSON.stringify(dump()),
//                     "respelt_root", "respelt_dump", "loaded_root" or "load_error"}]}
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { StandardMerkleTree } = require("@openzeppelin/merkle-tree");

const ENCODING = ["address", "uint256"];
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const cases = input.cases.map(({ values, respelt, dump }) => {
  const tree = StandardMerkleTree.of(values, ENCODING);
  const respeltTree = StandardMerkleTree.of(respelt, ENCODING);
  const out = {
    root: tree.root,
    proofs: values.map((_, i) => tree.getProof(i)),
    dump: JSON.stringify(tree.dump()),
    respelt_root: respeltTree.root,
    respelt_dump: respeltTree.dump(),
  };
  try {
    out.loaded_root = StandardMerkleTree.load(dump).root;
  } catch (error) {
    out.load_error = String(error);
  }
  return out;
});
process.stdout.write(JSON.stringify({ cases }));
