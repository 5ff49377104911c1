// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title BN254
/// @notice BN254 (alt_bn128) arithmetic over the EVM precompiles (0x05 modexp, 0x06 ecAdd,
/// 0x07 ecMul, 0x08 pairing) and the committee's BLS check (docs/committee.md "Keys and
/// signatures"): signatures and `apk1` in G1, `apk2` in G2, hash to G1 by try-and-increment.
///
/// G2 coordinates are in EIP-197 order: `X = [x_im, x_re]`, `Y = [y_im, y_re]`. The point at
/// infinity is (0, 0) in G1, as the precompiles encode it. The precompiles check that their
/// inputs are on the curve (and, for G2 in the pairing, in the subgroup) and fail otherwise;
/// `ecAdd`, `ecMul` and `neg` revert on such a failure, `verify` reports it.
library BN254 {
    /// @notice Base field modulus p.
    uint256 internal constant P = 0x30644e72e131a029b85045b68181585d97816a916871ca8d3c208c16d87cfd47;
    /// @notice Group order r.
    uint256 internal constant R = 0x30644e72e131a029b85045b68181585d2833e84879b9709143e1f593f0000001;
    /// @dev (p + 1) / 4: since p ≡ 3 mod 4, β^((p+1)/4) is a square root of β when one exists.
    uint256 private constant SQRT_EXPONENT = 0xc19139cb84c680a6e14116da060561765e05aa45a1c72a34f082305b61f3f52;

    // The G2 generator's coordinates, and the y of its negation (x is the same).
    uint256 private constant G2_X_IM = 0x198e9393920d483a7260bfb731fb5d25f1aa493335a9e71297e485b7aef312c2;
    uint256 private constant G2_X_RE = 0x1800deef121f1e76426a00665e5c4479674322d4f75edadd46debd5cd992f6ed;
    uint256 private constant G2_Y_IM = 0x090689d0585ff075ec9e99ad690c3395bc4b313370b38ef355acdadcd122975b;
    uint256 private constant G2_Y_RE = 0x12c85ea5db8c6deb4aab71808dcb408fe3d1e7690c43d37b4ce6cc0166fa7daa;
    uint256 private constant NEG_G2_Y_IM = 0x275dc4a288d1afb3cbb1ac09187524c7db36395df7be3b99e673b13a075a65ec;
    uint256 private constant NEG_G2_Y_RE = 0x1d9befcd05a5323e6da4d435f3b617cdb3af83285c2df711ef39c01571827f9d;

    struct G1Point {
        uint256 X;
        uint256 Y;
    }

    /// @dev EIP-197 order: the imaginary coefficient first.
    struct G2Point {
        uint256[2] X;
        uint256[2] Y;
    }

    /// @notice A precompile call failed (an input off the curve, or out of gas).
    error BN254PrecompileFailed(uint256 precompile);

    /// @notice The generator of G1, (1, 2).
    function generatorG1() internal pure returns (G1Point memory) {
        return G1Point(1, 2);
    }

    /// @notice The generator of G2.
    function generatorG2() internal pure returns (G2Point memory) {
        return G2Point([G2_X_IM, G2_X_RE], [G2_Y_IM, G2_Y_RE]);
    }

    /// @notice −G2.
    function negGeneratorG2() internal pure returns (G2Point memory) {
        return G2Point([G2_X_IM, G2_X_RE], [NEG_G2_Y_IM, NEG_G2_Y_RE]);
    }

    /// @notice −p (the point at infinity stays itself). Expects coordinates below P.
    function neg(G1Point memory p) internal pure returns (G1Point memory) {
        if (p.X == 0 && p.Y == 0) return p;
        return G1Point(p.X, P - (p.Y % P));
    }

    /// @notice p1 + p2 (precompile 0x06); reverts when a point is not on the curve.
    function ecAdd(G1Point memory p1, G1Point memory p2) internal view returns (G1Point memory r) {
        bool ok;
        assembly ("memory-safe") {
            let m := mload(0x40)
            mstore(m, mload(p1))
            mstore(add(m, 0x20), mload(add(p1, 0x20)))
            mstore(add(m, 0x40), mload(p2))
            mstore(add(m, 0x60), mload(add(p2, 0x20)))
            ok := staticcall(gas(), 0x06, m, 0x80, r, 0x40)
        }
        if (!ok) revert BN254PrecompileFailed(0x06);
    }

    /// @notice s·p (precompile 0x07); reverts when the point is not on the curve.
    function ecMul(G1Point memory p, uint256 s) internal view returns (G1Point memory r) {
        bool ok;
        assembly ("memory-safe") {
            let m := mload(0x40)
            mstore(m, mload(p))
            mstore(add(m, 0x20), mload(add(p, 0x20)))
            mstore(add(m, 0x40), s)
            ok := staticcall(gas(), 0x07, m, 0x60, r, 0x40)
        }
        if (!ok) revert BN254PrecompileFailed(0x07);
    }

    /// @notice Whether e(a1, a2) · e(b1, b2) = 1 (precompile 0x08). `callOk` is false when the
    /// precompile failed (a point off the curve or outside G2's subgroup); `pairingOk` is then
    /// false too.
    function pairing2(G1Point memory a1, G2Point memory a2, G1Point memory b1, G2Point memory b2)
        internal
        view
        returns (bool pairingOk, bool callOk)
    {
        uint256[12] memory input;
        input[0] = a1.X;
        input[1] = a1.Y;
        input[2] = a2.X[0];
        input[3] = a2.X[1];
        input[4] = a2.Y[0];
        input[5] = a2.Y[1];
        input[6] = b1.X;
        input[7] = b1.Y;
        input[8] = b2.X[0];
        input[9] = b2.X[1];
        input[10] = b2.Y[0];
        input[11] = b2.Y[1];
        uint256[1] memory out;
        assembly ("memory-safe") {
            callOk := staticcall(gas(), 0x08, input, 0x180, out, 0x20)
        }
        pairingOk = callOk && out[0] == 1;
    }

    /// @notice Hash to G1 (docs/committee.md): x = digest mod p; while x³ + 3 has no square
    /// root mod p, x = x + 1 mod p; y = (x³ + 3)^((p+1)/4). About half the x values succeed, so
    /// the expected cost is two modexp calls. Not constant time: messages are public.
    function hashToG1(bytes32 digest) internal view returns (G1Point memory) {
        uint256 x = uint256(digest) % P;
        while (true) {
            uint256 beta = addmod(mulmod(mulmod(x, x, P), x, P), 3, P);
            uint256 y = _sqrtCandidate(beta);
            if (mulmod(y, y, P) == beta) return G1Point(x, y);
            x = addmod(x, 1, P);
        }
        // unreachable: the loop returns
        return G1Point(0, 0);
    }

    /// @notice γ = keccak256(m ‖ apk1 ‖ apk2 ‖ σ) mod r, G2 in EIP-197 order (docs/committee.md).
    function gamma(bytes32 digest, G1Point memory apk1, G2Point memory apk2, G1Point memory sigma)
        internal
        pure
        returns (uint256)
    {
        return uint256(
            keccak256(
                abi.encodePacked(
                    digest, apk1.X, apk1.Y, apk2.X[0], apk2.X[1], apk2.Y[0], apk2.Y[1], sigma.X, sigma.Y
                )
            )
        ) % R;
    }

    /// @notice The committee's check of σ on `digest` under (apk1, apk2):
    /// e(σ + γ·apk1, −G2) · e(H(m) + γ·G1, apk2) = 1, which proves both the signature and that
    /// apk2 is the G2 twin of apk1. `callOk` is false when a precompile failed (a point off the
    /// curve); `pairingOk` is then false too. Never reverts on bad points.
    function verify(bytes32 digest, G1Point memory apk1, G2Point memory apk2, G1Point memory sigma)
        internal
        view
        returns (bool pairingOk, bool callOk)
    {
        uint256 m;
        assembly ("memory-safe") {
            m := mload(0x40)
            mstore(m, digest)
            mstore(add(m, 0x20), mload(apk1))
            mstore(add(m, 0x40), mload(add(apk1, 0x20)))
            let x := mload(apk2)
            let y := mload(add(apk2, 0x20))
            mstore(add(m, 0x60), mload(x))
            mstore(add(m, 0x80), mload(add(x, 0x20)))
            mstore(add(m, 0xa0), mload(y))
            mstore(add(m, 0xc0), mload(add(y, 0x20)))
            mstore(add(m, 0xe0), mload(sigma))
            mstore(add(m, 0x100), mload(add(sigma, 0x20)))
        }
        return verifyAt(m);
    }

    /// @notice `verify` on operands laid out in memory at `ptr`: the nine words γ hashes
    /// (digest, apk1.x, apk1.y, apk2.x_im, apk2.x_re, apk2.y_im, apk2.y_re, σ.x, σ.y). Uses the
    /// 0x180 bytes from `ptr + 0x120` as scratch and overwrites the digest word; allocates
    /// nothing (callers lay the operands out at the free memory pointer). Hashes to G1 as
    /// `hashToG1` (modexp), then checks as `verifyHashedAt`.
    function verifyAt(uint256 ptr) internal view returns (bool pairingOk, bool callOk) {
        uint256 hx;
        uint256 hy;
        assembly ("memory-safe") {
            let q := add(ptr, 0x120)
            // H(m) = (hx, hy) by try-and-increment, as hashToG1; modexp reads q..q+0xc0 and
            // writes its result over the base.
            hx := mod(mload(ptr), P)
            mstore(q, 0x20)
            mstore(add(q, 0x20), 0x20)
            mstore(add(q, 0x40), 0x20)
            callOk := 1
            for {} 1 {} {
                let beta := addmod(mulmod(mulmod(hx, hx, P), hx, P), 3, P)
                mstore(add(q, 0x60), beta)
                mstore(add(q, 0x80), SQRT_EXPONENT)
                mstore(add(q, 0xa0), P)
                if iszero(staticcall(gas(), 0x05, q, 0xc0, add(q, 0x60), 0x20)) {
                    callOk := 0
                    break
                }
                hy := mload(add(q, 0x60))
                if eq(mulmod(hy, hy, P), beta) { break }
                hx := addmod(hx, 1, P)
            }
        }
        if (callOk) (pairingOk, callOk) = verifyHashedAt(ptr, hx, hy);
    }

    /// @notice H(digest) from a hint instead of square roots computed on chain (docs/committee.md
    /// "Hash to G1"): the hint is the `hintLength` words at calldata `hintOffset`, one per
    /// try-and-increment candidate x_j = (digest mod p) + j. Each word but the last is a z with
    /// z² = −β_j (β_j = x_j³ + 3), which proves β_j has no square root (−1 has none, p ≡ 3 mod
    /// 4, and β_j ≠ 0: G1 has odd order, so no point has y = 0); the last is a y < p with
    /// y² = β_k, so H = (x_k, y) with k the first candidate that is a square, as `hashToG1`
    /// finds it. Either root of β_k is taken: −σ on −H is the same verdict. `ok` is false when
    /// the hint is empty or a word fails its equation.
    function hashToG1Hinted(bytes32 digest, uint256 hintOffset, uint256 hintLength)
        internal
        pure
        returns (uint256 x, uint256 y, bool ok)
    {
        assembly ("memory-safe") {
            let p := P
            x := mod(digest, p)
            let last := add(hintOffset, shl(5, sub(hintLength, 1)))
            for { let h := hintOffset } hintLength { h := add(h, 0x20) } {
                let beta := addmod(mulmod(mulmod(x, x, p), x, p), 3, p)
                let w := calldataload(h)
                if eq(h, last) {
                    ok := and(lt(w, p), eq(mulmod(w, w, p), beta))
                    y := w
                    break
                }
                if iszero(eq(mulmod(w, w, p), sub(p, beta))) { break }
                x := addmod(x, 1, p)
            }
        }
    }

    /// @notice The hint `hashToG1Hinted` takes for `digest` (for tests and off-chain callers:
    /// a modexp per candidate).
    function hashToG1Hint(bytes32 digest) internal view returns (uint256[] memory hint) {
        uint256 x = uint256(digest) % P;
        uint256[] memory words = new uint256[](256);
        uint256 k;
        while (true) {
            uint256 beta = addmod(mulmod(mulmod(x, x, P), x, P), 3, P);
            uint256 y = _sqrtCandidate(beta);
            if (mulmod(y, y, P) == beta) {
                words[k++] = y;
                break;
            }
            words[k++] = _sqrtCandidate(P - beta);
            x = addmod(x, 1, P);
        }
        hint = new uint256[](k);
        for (uint256 i; i < k; ++i) {
            hint[i] = words[i];
        }
    }

    /// @notice The pairing check of `verifyAt` with H(m) = (hx, hy) already known (a point on
    /// the curve): γ from the nine words at `ptr`, then
    /// e(σ + γ·apk1, −G2) · e(H(m) + γ·G1, apk2) = 1. Same memory use as `verifyAt`.
    function verifyHashedAt(uint256 ptr, uint256 hx, uint256 hy) internal view returns (bool pairingOk, bool callOk) {
        assembly ("memory-safe") {
            let g := mod(keccak256(ptr, 0x120), R)
            let q := add(ptr, 0x120)
            // pairing input at q: left = σ + γ·apk1, −G2, right = H(m) + γ·G1, apk2
            mstore(q, mload(add(ptr, 0x20)))
            mstore(add(q, 0x20), mload(add(ptr, 0x40)))
            mstore(add(q, 0x40), g)
            callOk := staticcall(gas(), 0x07, q, 0x60, add(q, 0x40), 0x40)
            mstore(q, mload(add(ptr, 0xe0)))
            mstore(add(q, 0x20), mload(add(ptr, 0x100)))
            callOk := and(callOk, staticcall(gas(), 0x06, q, 0x80, q, 0x40))
            let r := add(q, 0xc0)
            mstore(r, 1)
            mstore(add(r, 0x20), 2)
            mstore(add(r, 0x40), g)
            callOk := and(callOk, staticcall(gas(), 0x07, r, 0x60, add(r, 0x40), 0x40))
            mstore(r, hx)
            mstore(add(r, 0x20), hy)
            callOk := and(callOk, staticcall(gas(), 0x06, r, 0x80, r, 0x40))
            mstore(add(q, 0x40), G2_X_IM)
            mstore(add(q, 0x60), G2_X_RE)
            mstore(add(q, 0x80), NEG_G2_Y_IM)
            mstore(add(q, 0xa0), NEG_G2_Y_RE)
            mstore(add(r, 0x40), mload(add(ptr, 0x60)))
            mstore(add(r, 0x60), mload(add(ptr, 0x80)))
            mstore(add(r, 0x80), mload(add(ptr, 0xa0)))
            mstore(add(r, 0xa0), mload(add(ptr, 0xc0)))
            callOk := and(callOk, staticcall(gas(), 0x08, q, 0x180, ptr, 0x20))
            pairingOk := and(callOk, eq(mload(ptr), 1))
        }
    }

    /// @dev β^((p+1)/4) mod p: a square root of β when β is a square.
    function _sqrtCandidate(uint256 beta) private view returns (uint256) {
        return expModP(beta, SQRT_EXPONENT);
    }

    /// @notice `base^exponent mod p` through precompile 0x05 (modexp).
    function expModP(uint256 base, uint256 exponent) internal view returns (uint256 y) {
        bool ok;
        assembly ("memory-safe") {
            let m := mload(0x40)
            mstore(m, 0x20)
            mstore(add(m, 0x20), 0x20)
            mstore(add(m, 0x40), 0x20)
            mstore(add(m, 0x60), base)
            mstore(add(m, 0x80), exponent)
            mstore(add(m, 0xa0), P)
            ok := staticcall(gas(), 0x05, m, 0xc0, m, 0x20)
            y := mload(m)
        }
        if (!ok) revert BN254PrecompileFailed(0x05);
    }
}
