import Testing
import VaultCrypto
import VaultModel
import VaultStore

/// PRODUCT.md section 3: each access mode is readable in exactly the lock
/// states `AccessMode.isReadable(in:)` allows, and a `locked` error otherwise.
@Suite("Access modes and lock states")
struct LockStateTests {
    static let secretPrefix = "secret-for-"

    /// A vault with a passphrase holding one item of every mode, stored while unlocked.
    static func makeVaultWithEveryMode(_ folder: VaultFolder) throws {
        let (_, vault) = try folder.open()
        try vault.initialize(passphrase: passphrase("right passphrase"))
        #expect(vault.lockState == .unlocked)
        for mode in AccessMode.allCases {
            try vault.put(itemKey(for: mode), mode: mode, text: secretPrefix + mode.rawValue)
        }
    }

    /// A new vault on the same files, brought into `state` the way a daemon gets there.
    static func reopen(_ folder: VaultFolder, into state: LockState) throws -> Vault {
        let vault = try folder.reopen()
        #expect(vault.lockState == .lockedSinceStart)
        if state != .lockedSinceStart { try vault.unlock(passphrase: passphrase("right passphrase")) }
        if state == .locked { vault.lock() }
        #expect(vault.lockState == state)
        return vault
    }

    /// Checks every mode's item against the rule for `state`.
    static func expectReadability(_ vault: Vault, in state: LockState) {
        let listed = Dictionary(uniqueKeysWithValues: vault.list().map { ($0.item.key, $0.readable) })
        for mode in AccessMode.allCases {
            let key = itemKey(for: mode)
            if mode.isReadable(in: state) {
                do {
                    #expect(try vault.secretText(key) == secretPrefix + mode.rawValue)
                } catch {
                    Issue.record("\(mode.rawValue) should be readable in \(state.rawValue): \(error)")
                }
                #expect(listed[key] == true, "\(mode.rawValue) listed readable in \(state.rawValue)")
            } else {
                let error = vaultError { _ = try vault.secretText(key) }
                #expect(error?.code == .locked, "\(mode.rawValue) in \(state.rawValue): \(String(describing: error))")
                #expect(error?.message.contains(key.description) == true)
                #expect(listed[key] == false, "\(mode.rawValue) listed unreadable in \(state.rawValue)")
            }
        }
    }

    @Test("every mode is readable exactly when its rule allows", arguments: [LockState.lockedSinceStart, .unlocked, .locked])
    func read_afterRestartInLockState_followsTheModeRule(state: LockState) throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let vault = try Self.reopen(folder, into: state)
            Self.expectReadability(vault, in: state)
        }
    }

    @Test func lockThenUnlock_inOneRun_locksAndReopensWhenUnlockedItems() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let vault = try Self.reopen(folder, into: .unlocked)
            vault.lock()
            vault.lock()
            #expect(vault.lockState == .locked)
            Self.expectReadability(vault, in: .locked)
            try vault.unlock(passphrase: passphrase("right passphrase"))
            #expect(vault.lockState == .unlocked)
            Self.expectReadability(vault, in: .unlocked)
        }
    }

    @Test func lock_beforeFirstUnlock_staysLockedSinceStart() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let vault = try folder.reopen()
            vault.lock()
            #expect(vault.lockState == .lockedSinceStart)
            Self.expectReadability(vault, in: .lockedSinceStart)
        }
    }

    @Test func unlock_withoutPassphraseOnVaultThatHasOne_isAUsageErrorAndStaysLocked() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let vault = try folder.reopen()
            let error = vaultError { try vault.unlock(passphrase: nil) }
            #expect(error?.code == .usage)
            #expect(vault.lockState == .lockedSinceStart)
        }
    }

    @Test func put_whileLocked_isRefusedForModesNotReadable_andAllowedForOthers() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let vault = try folder.reopen()
            for mode in AccessMode.allCases {
                let key = ItemKey(provider: "new", account: mode.rawValue)
                let error = vaultError { try vault.put(key, mode: mode, text: "x") }
                if mode.isReadable(in: .lockedSinceStart) {
                    #expect(error == nil, "\(mode.rawValue)")
                } else {
                    #expect(error?.code == .locked, "\(mode.rawValue)")
                    #expect(vault.item(key) == nil)
                }
            }
        }
    }

    @Test func open_vaultWithoutPassphrase_isUnlockedAtStart() throws {
        try withVaultFolder { folder in
            let (_, first) = try folder.open()
            #expect(first.status.initialized == false)
            for mode in AccessMode.allCases where mode != .whenPasscodeSetThisDeviceOnly {
                try first.put(itemKey(for: mode), mode: mode, text: Self.secretPrefix + mode.rawValue)
            }
            #expect(first.status.hasPassphrase == false)

            let vault = try folder.reopen()
            #expect(vault.lockState == .unlocked)
            for mode in AccessMode.allCases where mode != .whenPasscodeSetThisDeviceOnly {
                #expect(try vault.secretText(itemKey(for: mode)) == Self.secretPrefix + mode.rawValue)
            }
            vault.lock()
            #expect(vault.lockState == .locked)
            let locked = vaultError { _ = try vault.secretText(itemKey(for: .whenUnlocked)) }
            #expect(locked?.code == .locked)
            #expect(try vault.secretText(itemKey(for: .afterFirstUnlock)) == Self.secretPrefix + AccessMode.afterFirstUnlock.rawValue)
            try vault.unlock(passphrase: nil)
            #expect(try vault.secretText(itemKey(for: .whenUnlockedThisDeviceOnly)) == Self.secretPrefix + AccessMode.whenUnlockedThisDeviceOnly.rawValue)
        }
    }

    @Test func put_passcodeModeWithoutPassphrase_isRefusedAsLocked() throws {
        try withVaultFolder { folder in
            let (store, vault) = try folder.open()
            let key = itemKey(for: .whenPasscodeSetThisDeviceOnly)
            let error = vaultError { try vault.put(key, mode: .whenPasscodeSetThisDeviceOnly, text: "secret") }
            #expect(error?.code == .locked)
            #expect(error?.message.contains("passphrase") == true)
            #expect(vault.item(key) == nil)
            #expect(try store.allItems().isEmpty)
            // Still refused once the vault exists without a passphrase.
            try vault.put(itemKey(for: .always), mode: .always, text: "other")
            #expect(vaultError { try vault.put(key, mode: .whenPasscodeSetThisDeviceOnly, text: "secret") }?.code == .locked)
            #expect(try store.allItems().map(\.key) == [itemKey(for: .always)])
        }
    }

    @Test func removePassphrase_deletesPasscodeItems_andKeepsTheOthers() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            let second = ItemKey(provider: "other", account: "passcode-two")
            do {
                let vault = try Self.reopen(folder, into: .unlocked)
                try vault.put(second, mode: .whenPasscodeSetThisDeviceOnly, text: "second")
                try vault.removePassphrase(current: passphrase("right passphrase"))
                #expect(vault.status.hasPassphrase == false)
                for key in [itemKey(for: .whenPasscodeSetThisDeviceOnly), second] {
                    #expect(vault.item(key) == nil)
                    #expect(vaultError { _ = try vault.secretText(key) }?.code == .notFound)
                }
            }
            let (store, vault) = try folder.open()
            #expect(vault.lockState == .unlocked)
            let stored = Set(try store.allItems().map(\.key))
            #expect(!stored.contains(itemKey(for: .whenPasscodeSetThisDeviceOnly)))
            #expect(!stored.contains(second))
            for mode in AccessMode.allCases where mode != .whenPasscodeSetThisDeviceOnly {
                #expect(try vault.secretText(itemKey(for: mode)) == Self.secretPrefix + mode.rawValue)
            }
            #expect(vaultError { try vault.put(second, mode: .whenPasscodeSetThisDeviceOnly, text: "again") }?.code == .locked)
        }
    }

    @Test func item_missing_isNotFoundInEveryState() throws {
        try withVaultFolder { folder in
            try Self.makeVaultWithEveryMode(folder)
            for state in [LockState.lockedSinceStart, .unlocked, .locked] {
                let vault = try Self.reopen(folder, into: state)
                let error = vaultError { _ = try vault.secretText(ItemKey(provider: "nobody")) }
                #expect(error?.code == .notFound)
            }
        }
    }
}
