import Testing
import VaultModel
import VaultStore

/// PRODUCT.md section 2: no token, refresh token or client secret is ever
/// plaintext in the store's files or the key files.
@Suite("No plaintext at rest")
struct PlaintextAtRestTests {
    /// Every file of the vault that exists, with its bytes.
    static func files(_ folder: VaultFolder) -> [(path: String, bytes: [UInt8])] {
        folder.allFiles.compactMap { path in fileBytes(path).map { (path, $0) } }
    }

    static func expectAbsent(_ secrets: [String], in folder: VaultFolder, _ moment: String) {
        for (path, bytes) in files(folder) {
            for secret in secrets {
                // The whole secret, and its first 16 characters (a partial leak counts too).
                for needle in [secret, String(secret.prefix(16))] {
                    #expect(!contains(bytes, Array(needle.utf8)), "\(moment): \(path) holds \(needle.prefix(4))… in plaintext")
                }
            }
        }
    }

    @Test("stored tokens never appear in the store, its WAL and shm, or the key files", arguments: [false, true])
    func put_distinctiveTokens_areAbsentFromEveryFile_beforeAndAfterCheckpoint(withPassphrase: Bool) throws {
        try withVaultFolder { folder in
            let (store, vault) = try folder.open()
            let pass = "passphrase-" + distinctiveToken("")
            if withPassphrase { try vault.initialize(passphrase: passphrase(pass)) }
            var secrets: [String] = withPassphrase ? [pass] : []
            let provider = "marker-provider-visible"
            for mode in AccessMode.allCases where withPassphrase || mode != .whenPasscodeSetThisDeviceOnly {
                let access = distinctiveToken("gho_"), refresh = distinctiveToken("ghr_")
                let json = #"{"access_token":"\#(access)","refresh_token":"\#(refresh)","token_type":"Bearer"}"#
                try vault.put(itemKey(for: mode, provider: provider), mode: mode, text: json)
                let clientSecret = distinctiveToken("cs_")
                try vault.put(ItemKey(provider: provider, account: mode.rawValue, kind: .clientSecret), mode: mode, text: clientSecret)
                secrets += [access, refresh, clientSecret]
            }
            // An overwritten and a deleted token must not linger either.
            let replaced = distinctiveToken("old_"), deleted = distinctiveToken("del_")
            let replacedKey = ItemKey(provider: provider, account: "replaced")
            try vault.put(replacedKey, mode: .always, text: replaced)
            try vault.put(replacedKey, mode: .always, text: distinctiveToken("new_"))
            try vault.put(ItemKey(provider: provider, account: "deleted"), mode: .always, text: deleted)
            try vault.delete(ItemKey(provider: provider, account: "deleted"))
            secrets += [replaced, deleted]

            // The search works: the metadata, which is plaintext by design, is found.
            let before = Self.files(folder)
            #expect(before.contains { contains($0.bytes, Array(provider.utf8)) }, "control: the provider name should be visible")
            #expect(fileBytes(folder.database + "-wal").map { !$0.isEmpty } == true, "the WAL should hold the writes before a checkpoint")
            #expect(fileBytes(folder.keyFiles.deviceKeyPath)?.count == 32)
            #expect((fileBytes(folder.keyFiles.vaultKeyPath) != nil) == !withPassphrase)
            // Every secret reads back, so they were really stored.
            #expect(try vault.secretText(replacedKey).hasPrefix("new_"))
            Self.expectAbsent(secrets, in: folder, "before checkpoint")

            try store.checkpoint()
            #expect(fileBytes(folder.database).map { contains($0, Array(provider.utf8)) } == true, "control: after a checkpoint the main file holds the rows")
            Self.expectAbsent(secrets, in: folder, "after checkpoint")
        }
    }
}
