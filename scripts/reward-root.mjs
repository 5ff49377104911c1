// The Merkle root of a published reward table (docs/rewards.md), computed with nothing of this
// project's: the table's JSON and OpenZeppelin's @openzeppelin/merkle-tree (npm).
//
//   node scripts/reward-root.mjs TABLE.json     (or the table on standard input)
//
// Prints {"root", "accounts", "total"}: compare the root with the one attested on chain
// (`gym rewards status --json`, or the distributor's `epochInfo(epoch)`).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { StandardMerkleTree } = require("@openzeppelin/merkle-tree");

const text = process.argv[2] ? readFileSync(process.argv[2], "utf8") : readFileSync(0, "utf8");
const table = JSON.parse(text);
if (table.format !== "gym-rewards/2") {
  process.stderr.write(`not a gym-rewards/2 table (format ${JSON.stringify(table.format)})\n`);
  process.exit(2);
}
const values = table.accounts.map(({ account, total }) => [account, total]);
let total = 0n;
for (const [, amount] of values) total += BigInt(amount);
const root = values.length
  ? StandardMerkleTree.of(values, ["address", "uint256"]).root
  : "0x" + "00".repeat(32);
process.stdout.write(JSON.stringify({ root, accounts: values.length, total: total.toString() }) + "\n");
