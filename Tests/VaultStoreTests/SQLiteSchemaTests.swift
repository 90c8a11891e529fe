import Testing
import VaultModel
import VaultStore

/// The SQLite file: schema version, WAL, migrations run once, and clear
/// errors for files that are not TokenVault stores.
@Suite("SQLite schema")
struct SQLiteSchemaTests {
    /// The schema version this TokenVault writes (one migration so far).
    static let currentVersion = 1

    @Test func create_newStore_hasCurrentUserVersionWALAndTheTables() throws {
        try withVaultFolder { folder in
            let store = try SQLiteStore(path: folder.database)
            #expect(try store.schemaVersion() == Self.currentVersion)
            #expect(try SQLiteCLI.execute(folder.database, "PRAGMA user_version;") == String(Self.currentVersion))
            #expect(try SQLiteCLI.execute(folder.database, "PRAGMA journal_mode;") == "wal")
            #expect(try SQLiteCLI.execute(folder.database, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name;") == "items\nvault_records")
            let columns = try SQLiteCLI.execute(folder.database, "SELECT name FROM pragma_table_info('items') ORDER BY cid;")
            #expect(columns.split(separator: "\n") == ["provider", "account", "kind", "mode", "expires_at", "status", "created_at", "updated_at", "sealed"])
            #expect(try store.integrityCheck() == "ok")
            #expect(FileSystemMode.of(folder.database) == 0o600)
        }
    }

    @Test func reopen_existingStore_keepsDataAndDoesNotRerunMigrations() throws {
        try withVaultFolder { folder in
            do {
                let (_, vault) = try folder.open()
                try vault.put(ItemKey(provider: "github"), mode: .always, text: "token")
            }
            let schema = try SQLiteCLI.execute(folder.database, "SELECT type, name, sql FROM sqlite_master ORDER BY name;")
            // A marker row a migration re-run (which creates the tables) could not keep.
            try SQLiteCLI.execute(folder.database, "INSERT INTO vault_records (name, value) VALUES ('test.marker', X'2A');")

            for _ in 0..<3 {
                let (store, vault) = try folder.open()
                #expect(try store.schemaVersion() == Self.currentVersion)
                #expect(try store.records()["test.marker"] == [0x2A])
                #expect(try vault.secretText(ItemKey(provider: "github")) == "token")
            }
            #expect(try SQLiteCLI.execute(folder.database, "SELECT type, name, sql FROM sqlite_master ORDER BY name;") == schema)
            #expect(try SQLiteCLI.execute(folder.database, "PRAGMA user_version;") == String(Self.currentVersion))
        }
    }

    @Test func open_storeWithNewerSchema_failsNamingBothVersions_andLeavesItAlone() throws {
        try withVaultFolder { folder in
            _ = try SQLiteStore(path: folder.database)
            try SQLiteCLI.execute(folder.database, "PRAGMA user_version = 99;")
            let error = vaultError { _ = try SQLiteStore(path: folder.database) }
            #expect(error?.code == .failure)
            #expect(error?.message.contains("99") == true, "\(String(describing: error))")
            #expect(error?.message.contains("newer") == true)
            #expect(error?.message.contains(folder.database) == true)
            #expect(try SQLiteCLI.execute(folder.database, "PRAGMA user_version;") == "99")
        }
    }

    @Test("a file that is not a database is refused clearly and left as it was", arguments: [16, 100, 4096, 70_000])
    func open_fileThatIsNotADatabase_failsWithClearErrorAndKeepsTheFile(size: Int) throws {
        try withVaultFolder { folder in
            let text = String(repeating: "This is not an SQLite database, it is a text file. ", count: size / 50 + 1).prefix(size)
            try run("/bin/sh", ["-c", "umask 077 && cat > \"$0\"", folder.database], stdin: String(text))
            let before = try #require(fileBytes(folder.database))
            #expect(before.count == size)

            let error = vaultError { _ = try SQLiteStore(path: folder.database) }
            #expect(error?.code == .failure)
            #expect(error?.message.contains(folder.database) == true, "\(String(describing: error))")
            #expect(error?.message.contains("not a TokenVault store") == true || error?.message.contains("not a database") == true)
            #expect(fileBytes(folder.database) == before, "the file must be left untouched")
        }
    }

    @Test func open_emptyExistingFile_becomesANewStore() throws {
        try withVaultFolder { folder in
            try run("/bin/sh", ["-c", "umask 077 && : > \"$0\"", folder.database])
            let store = try SQLiteStore(path: folder.database)
            #expect(try store.schemaVersion() == Self.currentVersion)
            #expect(try store.allItems().isEmpty)
        }
    }
}
