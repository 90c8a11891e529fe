import Testing
import VaultCrypto
import VaultModel
import VaultStore

/// Passphrases: a wrong one is `denied` and changes nothing; changing,
/// setting or removing one re-wraps the class keys and never an item.
@Suite("Passphrase")
struct PassphraseTests {
    static let right = "right passphrase"
    static let wrong = "Tr0ub4dor&3-not-it"

    /// A vault with a passphrase and one item of every mode.
    static func makeVault(_ folder: VaultFolder, passphrase text: String = right) throws {
        let (_, vault) = try folder.open()
        try vault.initialize(passphrase: passphrase(text))
        for mode in AccessMode.allCases { try vault.put(itemKey(for: mode), mode: mode, text: "secret-" + mode.rawValue) }
    }

    static func expectAllOpen(_ vault: Vault, except skipped: Set<AccessMode> = [], sourceLocation: SourceLocation = #_sourceLocation) {
        for mode in AccessMode.allCases where !skipped.contains(mode) {
            do {
                #expect(try vault.secretText(itemKey(for: mode)) == "secret-" + mode.rawValue, sourceLocation: sourceLocation)
            } catch {
                Issue.record("\(mode.rawValue) does not open: \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func unlock_withWrongPassphrase_isDeniedAndChangesNothing_thenRightOneWorks() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let records = try store.records()
            let items = try store.allItems()

            let error = vaultError { try vault.unlock(passphrase: passphrase(Self.wrong)) }
            #expect(error?.code == .denied)
            #expect(error?.message.contains(Self.wrong) == false)
            #expect(vault.lockState == .lockedSinceStart)
            #expect(vaultError { _ = try vault.secretText(itemKey(for: .whenUnlocked)) }?.code == .locked)
            #expect(try store.records() == records)
            #expect(try store.allItems() == items)

            try vault.unlock(passphrase: passphrase(Self.right))
            #expect(vault.lockState == .unlocked)
            Self.expectAllOpen(vault)
        }
    }

    @Test func changePassphrase_withWrongOldPassphrase_isDeniedAndChangesNothing() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let records = try store.records()
            let items = try store.allItems()
            let error = vaultError { try vault.changePassphrase(old: passphrase(Self.wrong), new: passphrase("new one")) }
            #expect(error?.code == .denied)
            #expect(try store.records() == records)
            #expect(try store.allItems() == items)

            let restarted = try folder.reopen()
            #expect(vaultError { try restarted.unlock(passphrase: passphrase("new one")) }?.code == .denied)
            try restarted.unlock(passphrase: passphrase(Self.right))
            Self.expectAllOpen(restarted)
        }
    }

    @Test func removePassphrase_withWrongPassphrase_isDeniedAndChangesNothing() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let records = try store.records()
            let items = try store.allItems()
            let error = vaultError { try vault.removePassphrase(current: passphrase(Self.wrong)) }
            #expect(error?.code == .denied)
            #expect(try store.records() == records)
            #expect(try store.allItems() == items)
            #expect(fileBytes(folder.keyFiles.vaultKeyPath) == nil, "no vault key file may appear")
            #expect(vault.status.hasPassphrase)
        }
    }

    @Test func changePassphrase_rewrapsClassKeysOnly_itemsUnchangedAndOpenAfterRestartWithNewPassphrase() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let items = try store.allItems()
            let records = try store.records()
            try vault.changePassphrase(old: passphrase(Self.right), new: passphrase("brand new passphrase"))

            #expect(try store.allItems() == items, "no item may be re-sealed")
            let after = try store.records()
            #expect(after["vault.kdf"] != records["vault.kdf"], "a new salt")
            for mode in AccessMode.allCases {
                let name = "class-key.\(mode.rawValue)"
                if mode.isWrappedByDeviceKey {
                    #expect(after[name] == records[name], "\(name) is wrapped by the device key and stays")
                } else {
                    #expect(after[name] != records[name], "\(name) is re-wrapped under the new vault key")
                }
            }

            let restarted = try folder.reopen()
            #expect(vaultError { try restarted.unlock(passphrase: passphrase(Self.right)) }?.code == .denied)
            try restarted.unlock(passphrase: passphrase("brand new passphrase"))
            Self.expectAllOpen(restarted)
        }
    }

    @Test func removePassphrase_rewrapsClassKeysOnly_itemsUnchangedAndOpenAfterRestartWithoutPassphrase() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let items = try store.allItems()
            try vault.removePassphrase(current: passphrase(Self.right))

            let expected = items.filter { $0.mode != .whenPasscodeSetThisDeviceOnly }
            #expect(expected.count == items.count - 1)
            #expect(try store.allItems() == expected, "items other than passcode ones are untouched")
            #expect(try store.records()["vault.kdf"] == nil)
            #expect(fileBytes(folder.keyFiles.vaultKeyPath)?.count == 32)

            let restarted = try folder.reopen()
            #expect(restarted.lockState == .unlocked)
            #expect(vaultError { try restarted.unlock(passphrase: passphrase(Self.right)) }?.code == .usage)
            Self.expectAllOpen(restarted, except: [.whenPasscodeSetThisDeviceOnly])
        }
    }

    @Test func setPassphrase_onVaultWithoutOne_rewrapsClassKeysOnly_andRestartNeedsIt() throws {
        try withVaultFolder { folder in
            let (store, vault) = try folder.open()
            for mode in AccessMode.allCases where mode != .whenPasscodeSetThisDeviceOnly {
                try vault.put(itemKey(for: mode), mode: mode, text: "secret-" + mode.rawValue)
            }
            #expect(fileBytes(folder.keyFiles.vaultKeyPath) != nil)
            let items = try store.allItems()
            try vault.setPassphrase(passphrase("first passphrase"))
            #expect(try store.allItems() == items)
            #expect(fileBytes(folder.keyFiles.vaultKeyPath) == nil, "the vault key file wraps nothing any more")
            #expect(vaultError { try vault.setPassphrase(passphrase("again")) }?.code == .usage)

            let restarted = try folder.reopen()
            #expect(restarted.lockState == .lockedSinceStart)
            #expect(try restarted.secretText(itemKey(for: .always)) == "secret-always")
            #expect(vaultError { _ = try restarted.secretText(itemKey(for: .afterFirstUnlock)) }?.code == .locked)
            try restarted.unlock(passphrase: passphrase("first passphrase"))
            Self.expectAllOpen(restarted, except: [.whenPasscodeSetThisDeviceOnly])
            try restarted.put(itemKey(for: .whenPasscodeSetThisDeviceOnly), mode: .whenPasscodeSetThisDeviceOnly, text: "now allowed")
        }
    }

    @Test func initialize_onExistingVault_failsAndKeepsTheOldPassphrase() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let (store, vault) = try folder.open()
            let records = try store.records()
            let error = vaultError { try vault.initialize(passphrase: passphrase("other")) }
            #expect(error?.code == .failure)
            #expect(try store.records() == records)
        }
    }

    /// The one test at the real cost: libsodium's interactive Argon2id limits.
    @Test func unlock_withDefaultKDFParameters_usesInteractiveCostsAndOpensItems() throws {
        try withVaultFolder { folder in
            let store = try SQLiteStore(path: folder.database)
            let vault = try Vault(store: store, keyFiles: folder.keyFiles, machineID: thisMachine)
            try vault.initialize(passphrase: passphrase(Self.right))
            try vault.put(itemKey(for: .whenUnlocked), mode: .whenUnlocked, text: "secret-when-unlocked")

            let kdf = try #require(try store.records()["vault.kdf"])
            let json = try JSON.parse(kdf)
            #expect(json["alg"]?.stringValue == "argon2id13")
            #expect(json["ops"]?.numberValue == Double(PasswordHash.Parameters.interactive.opsLimit))
            #expect(json["mem"]?.numberValue == Double(PasswordHash.Parameters.interactive.memLimit))
            #expect(json["salt"]?.stringValue?.count == 2 * PasswordHash.saltBytes)

            let restarted = try Vault(store: SQLiteStore(path: folder.database), keyFiles: folder.keyFiles, machineID: thisMachine)
            #expect(vaultError { try restarted.unlock(passphrase: passphrase(Self.wrong)) }?.code == .denied)
            try restarted.unlock(passphrase: passphrase(Self.right))
            #expect(try restarted.secretText(itemKey(for: .whenUnlocked)) == "secret-when-unlocked")
        }
    }
}
