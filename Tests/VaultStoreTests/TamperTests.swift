import Testing
import VaultModel
import VaultStore

/// PRODUCT.md sections 2 and 8: a record edited, swapped or relabelled by
/// another program fails to open with a clear error naming the item; the
/// other items still open.
@Suite("Tampered store")
struct TamperTests {
    static let first = ItemKey(provider: "github", account: "alice")
    static let second = ItemKey(provider: "github", account: "bob")
    static let untouched = ItemKey(provider: "gitlab", account: "carol")

    /// A vault without a passphrase (so every mode is readable) holding three items.
    static func makeVault(_ folder: VaultFolder, mode: AccessMode = .always) throws {
        let (_, vault) = try folder.open()
        try vault.put(first, mode: mode, text: "token-of-alice")
        try vault.put(second, mode: mode, text: "token-of-bob")
        try vault.put(untouched, mode: mode, text: "token-of-carol")
    }

    /// Reading `key` from a freshly opened vault fails with `.failure` naming it.
    static func expectTamperDetected(_ folder: VaultFolder, _ key: ItemKey, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let vault = try folder.reopen()
        let error = vaultError { _ = try vault.secretText(key) }
        #expect(error?.code == .failure, sourceLocation: sourceLocation)
        #expect(error?.message.contains(key.description) == true, "\(String(describing: error))", sourceLocation: sourceLocation)
        #expect(error?.message.contains("token-of") == false, sourceLocation: sourceLocation)
        #expect(try vault.secretText(untouched) == "token-of-carol", sourceLocation: sourceLocation)
    }

    @Test("a flipped byte anywhere in the sealed blob is detected", arguments: [0, 1, 24, 25, 30, -1])
    func open_whenSealedByteFlipped_failsNamingTheItem(offset: Int) throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            var sealed = try SQLiteCLI.sealed(folder.database, Self.first)
            let index = offset >= 0 ? offset : sealed.count + offset
            sealed[index] ^= 0x20
            try SQLiteCLI.execute(folder.database, SQLiteCLI.updateSealed(Self.first, sealed))
            #expect(try SQLiteCLI.sealed(folder.database, Self.first) == sealed)
            try Self.expectTamperDetected(folder, Self.first)
            #expect(try folder.reopen().secretText(Self.second) == "token-of-bob")
        }
    }

    @Test func open_whenSealedBlobTruncated_failsNamingTheItem() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            try SQLiteCLI.execute(folder.database, "UPDATE items SET sealed = X'0102' WHERE \(SQLiteCLI.row(Self.first));")
            try Self.expectTamperDetected(folder, Self.first)
        }
    }

    @Test func open_whenSealedBlobsOfTwoRowsSwapped_failsForBothNamingEach() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            let a = try SQLiteCLI.sealed(folder.database, Self.first)
            let b = try SQLiteCLI.sealed(folder.database, Self.second)
            try SQLiteCLI.execute(folder.database, SQLiteCLI.updateSealed(Self.first, b) + SQLiteCLI.updateSealed(Self.second, a))
            try Self.expectTamperDetected(folder, Self.first)
            try Self.expectTamperDetected(folder, Self.second)
        }
    }

    @Test("a row relabelled to another readable mode fails to open", arguments: [
        (AccessMode.always, AccessMode.alwaysThisDeviceOnly), (.afterFirstUnlock, .always), (.whenUnlocked, .whenUnlockedThisDeviceOnly),
        (.alwaysThisDeviceOnly, .afterFirstUnlockThisDeviceOnly),
    ])
    func open_whenRowModeChanged_failsWithClearError(from: AccessMode, to: AccessMode) throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder, mode: from)
            try SQLiteCLI.execute(folder.database, "UPDATE items SET mode = \(SQLiteCLI.quote(to.rawValue)) WHERE \(SQLiteCLI.row(Self.first));")
            let vault = try folder.reopen()
            #expect(vault.item(Self.first)?.mode == to)
            try Self.expectTamperDetected(folder, Self.first)
        }
    }

    @Test func open_whenRowModeIsUnknown_failsNamingTheItemAndMode() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            try SQLiteCLI.execute(folder.database, "UPDATE items SET mode = 'sometimes' WHERE \(SQLiteCLI.row(Self.first));")
            let error = vaultError { _ = try folder.reopen() }
            #expect(error?.code == .failure)
            #expect(error?.message.contains("github/alice") == true)
            #expect(error?.message.contains("sometimes") == true)
        }
    }

    @Test func open_whenRowProviderChanged_failsNamingTheItem() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            try SQLiteCLI.execute(folder.database, "UPDATE items SET provider = 'evil' WHERE \(SQLiteCLI.row(Self.first));")
            let moved = ItemKey(provider: "evil", account: Self.first.account)
            #expect(try folder.reopen().item(Self.first) == nil)
            try Self.expectTamperDetected(folder, moved)
        }
    }

    @Test func open_whenRowAccountOrKindChanged_failsNamingTheItem() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            try SQLiteCLI.execute(folder.database, """
                UPDATE items SET account = 'mallory' WHERE \(SQLiteCLI.row(Self.first));
                UPDATE items SET kind = 'client-secret' WHERE \(SQLiteCLI.row(Self.second));
                """)
            try Self.expectTamperDetected(folder, ItemKey(provider: "github", account: "mallory"))
            try Self.expectTamperDetected(folder, ItemKey(provider: "github", account: "bob", kind: .clientSecret))
        }
    }

    @Test func open_whenClassKeyRecordDamaged_failsClearlyWithoutCrashing() throws {
        try withVaultFolder { folder in
            try Self.makeVault(folder)
            try SQLiteCLI.execute(folder.database, "UPDATE vault_records SET value = X'00' WHERE name = 'class-key.always';")
            let error = vaultError { _ = try folder.reopen() }
            #expect(error != nil)
            #expect(error?.message.contains("always") == true, "\(String(describing: error))")
        }
    }
}
