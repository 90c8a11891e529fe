@preconcurrency import Glibc
import Testing
import VaultModel
import VaultStore

/// PRODUCT.md section 8: a full disk is a clear error naming the store, and
/// loses nothing stored before. Uses a real 1 MiB tmpfs, so it needs root.
@Suite("Full disk")
struct FullDiskTests {
    struct Stored {
        var texts: [ItemKey: String] = [:]
    }

    /// Fills the vault in `folder` until a put fails; returns what was stored and the error.
    static func fillUntilFull(_ folder: VaultFolder) throws -> (Stored, VaultError?) {
        let (_, vault) = try folder.open()
        var stored = Stored()
        let padding = String(repeating: "p", count: 2048)
        for i in 0..<2000 {
            let key = ItemKey(provider: "fill", account: "item-\(i)")
            let text = "secret-\(i)-" + padding
            if let error = vaultError({ try vault.put(key, mode: .afterFirstUnlock, text: text) }) {
                // The vault kept its old state: the failed item is not there, the others open.
                #expect(vault.item(key) == nil)
                expectAllOpen(vault, stored)
                return (stored, error)
            }
            stored.texts[key] = text
        }
        return (stored, nil)
    }

    static func expectAllOpen(_ vault: Vault, _ stored: Stored, sourceLocation: SourceLocation = #_sourceLocation) {
        for (key, text) in stored.texts {
            do { #expect(try vault.secretText(key) == text, sourceLocation: sourceLocation) } catch {
                Issue.record("\(key) stored before the disk filled does not open: \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test(.enabled(if: getuid() == 0, "mounting a 1 MiB tmpfs needs root"))
    func put_whenDiskIsFull_failsNamingTheStore_andEarlierItemsStillOpen() throws {
        try withTemporaryFolder { mountPoint in
            try run("mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mountPoint])
            defer {
                if (try? run("umount", [mountPoint])) == nil {
                    Issue.record("could not unmount \(mountPoint); detaching it")
                    _ = try? run("umount", ["-l", mountPoint])
                }
            }
            let folder = VaultFolder(path: mountPoint + "/vault")
            // Every store and vault is released when these calls return, so the tmpfs can be unmounted.
            let (stored, maybeError) = try Self.fillUntilFull(folder)
            let error = try #require(maybeError, "1 MiB should not hold 2000 items of 2 KiB")
            #expect(stored.texts.count > 10, "the vault should hold some items before the disk fills")
            #expect(error.code == .failure)
            #expect(error.message.contains("full disk"), "\(error)")
            #expect(error.message.contains(folder.database), "\(error)")

            try Self.reopenAndCheck(folder, stored)
        }
    }

    static func reopenAndCheck(_ folder: VaultFolder, _ stored: Stored) throws {
        let (store, vault) = try folder.open()
        expectAllOpen(vault, stored)
        #expect(Set(try store.allItems().map(\.key)) == Set(stored.texts.keys))
        #expect(try store.integrityCheck() == "ok")
        // Still full: another write fails the same clear way and loses nothing.
        let again = vaultError { try vault.put(ItemKey(provider: "fill", account: "late"), mode: .always, text: String(repeating: "q", count: 100_000)) }
        #expect(again?.message.contains("full disk") == true, "\(String(describing: again))")
        expectAllOpen(vault, stored)
    }
}
