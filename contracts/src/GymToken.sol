// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";
import {ERC20Votes} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Votes.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";

/// @title GymToken
/// @notice The DAO's voting token (DESIGN.md "Contracts"): ERC-20 with EIP-2612 permits and
/// ERC-5805 vote delegation and checkpoints, read by {GymGovernor}.
///
/// Supply is fixed at construction: the deployer names every initial holder, and nobody can
/// mint afterwards, so no key keeps a power over voting weight that the DAO cannot see.
///
/// Clock (ERC-6372): timestamps, not block numbers. The governor reads its clock from this
/// token, so the whole proposal lifecycle (voting delay, voting period, timelock delay) is
/// measured in seconds, as the TimelockController's delay already is. Block numbers would tie
/// voting periods to block production: on the devnet Anvil mines a block only per transaction
/// (a "3 day" period would never end on an idle chain), and on L2s block numbers advance at
/// rates that differ per chain (or follow L1).
contract GymToken is ERC20, ERC20Permit, ERC20Votes {
    /// @notice `holders` and `amounts` have different lengths.
    error GymTokenLengthMismatch(uint256 holders, uint256 amounts);

    /// @notice Mints `amounts[i]` tokens to `holders[i]`; the only mint there will ever be.
    /// @param name_ Token name, also the EIP-712 domain name of permits and delegations.
    /// @param symbol_ Token symbol.
    ///
    /// Requirements:
    /// - `holders` and `amounts` have the same length;
    /// - no holder is the zero address; the total fits ERC20Votes' limit (2^208 - 1).
    ///
    /// Emits: {Transfer} per holder (from the zero address).
    constructor(string memory name_, string memory symbol_, address[] memory holders, uint256[] memory amounts)
        ERC20(name_, symbol_)
        ERC20Permit(name_)
    {
        if (holders.length != amounts.length) revert GymTokenLengthMismatch(holders.length, amounts.length);
        for (uint256 i; i < holders.length; ++i) {
            _mint(holders[i], amounts[i]);
        }
    }

    /// @notice The ERC-6372 clock: the current block timestamp.
    function clock() public view override returns (uint48) {
        return uint48(block.timestamp);
    }

    /// @notice ERC-6372 description of {clock}.
    // solhint-disable-next-line func-name-mixedcase
    function CLOCK_MODE() public pure override returns (string memory) {
        return "mode=timestamp";
    }

    // ------------------------------------------------------------------ overrides required by Solidity

    /// @inheritdoc ERC20Permit
    function nonces(address owner) public view override(ERC20Permit, Nonces) returns (uint256) {
        return super.nonces(owner);
    }

    function _update(address from, address to, uint256 value) internal override(ERC20, ERC20Votes) {
        super._update(from, to, value);
    }
}
