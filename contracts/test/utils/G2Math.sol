// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../../src/BN254.sol";

/// @notice Affine addition in G2 (no precompile adds G2 points), for tests that aggregate the
/// vectors' pk2s of any signer subset. Coordinates in EIP-197 order ([im, re]); (0,0,0,0) is
/// the point at infinity. Slow and not constant time: test code only.
library G2Math {
    uint256 internal constant P = BN254.P;

    struct Fp2 {
        uint256 re;
        uint256 im;
    }

    function add(BN254.G2Point memory a, BN254.G2Point memory b) internal view returns (BN254.G2Point memory) {
        if (_isZero(a)) return b;
        if (_isZero(b)) return a;
        Fp2 memory x1 = Fp2(a.X[1], a.X[0]);
        Fp2 memory y1 = Fp2(a.Y[1], a.Y[0]);
        Fp2 memory x2 = Fp2(b.X[1], b.X[0]);
        Fp2 memory y2 = Fp2(b.Y[1], b.Y[0]);
        Fp2 memory lambda;
        if (x1.re == x2.re && x1.im == x2.im) {
            if (y1.re != y2.re || y1.im != y2.im) return BN254.G2Point([uint256(0), 0], [uint256(0), 0]);
            // tangent: 3x² / 2y
            lambda = _mul(_mul(Fp2(3, 0), _mul(x1, x1)), _inv(_mul(Fp2(2, 0), y1)));
        } else {
            lambda = _mul(_sub(y2, y1), _inv(_sub(x2, x1)));
        }
        Fp2 memory x3 = _sub(_sub(_mul(lambda, lambda), x1), x2);
        Fp2 memory y3 = _sub(_mul(lambda, _sub(x1, x3)), y1);
        return BN254.G2Point([x3.im, x3.re], [y3.im, y3.re]);
    }

    function _isZero(BN254.G2Point memory a) private pure returns (bool) {
        return a.X[0] == 0 && a.X[1] == 0 && a.Y[0] == 0 && a.Y[1] == 0;
    }

    function _sub(Fp2 memory a, Fp2 memory b) private pure returns (Fp2 memory) {
        return Fp2(addmod(a.re, P - b.re, P), addmod(a.im, P - b.im, P));
    }

    function _mul(Fp2 memory a, Fp2 memory b) private pure returns (Fp2 memory) {
        // (a.re + a.im i)(b.re + b.im i), i² = -1
        uint256 re = addmod(mulmod(a.re, b.re, P), P - mulmod(a.im, b.im, P), P);
        uint256 im = addmod(mulmod(a.re, b.im, P), mulmod(a.im, b.re, P), P);
        return Fp2(re, im);
    }

    function _inv(Fp2 memory a) private view returns (Fp2 memory) {
        uint256 norm = addmod(mulmod(a.re, a.re, P), mulmod(a.im, a.im, P), P);
        uint256 t = _invFp(norm);
        return Fp2(mulmod(a.re, t, P), mulmod(P - a.im, t, P));
    }

    function _invFp(uint256 x) private view returns (uint256) {
        return BN254.expModP(x, P - 2);
    }
}
