@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient
import VaultCrypto
import VaultModel
@testable import VaultSecretService
import VaultStore

/// Makes a SQLite vault in `folder` with `count` items spread over `modes`,
/// as a daemon of this machine would open it; returns each item's token.
func populateSQLiteVault(_ folder: String, count: Int, modes: [AccessMode], passphrase: String?) throws -> [ItemKey: String] {
    let store = try SQLiteStore(path: folder + "/vault.db")
    let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: try MachineIdentity.read(), kdfParameters: .minimumForTests)
    try vault.initialize(passphrase: try passphrase.map { try SecureBytes(copying: Array($0.utf8)) })
    var tokens: [ItemKey: String] = [:]
    var batch: [Vault.NewItem] = []
    for i in 0..<count {
        let key = ItemKey(provider: "p\(i % 20)", account: "a\(i)")
        let token = "tok_\(i)_" + uniqueToken("")
        tokens[key] = token
        batch.append(Vault.NewItem(key: key, mode: modes[i % modes.count], secrets: Array("{\"access_token\":\"\(token)\",\"token_type\":\"Bearer\"}".utf8),
                                   expiresAt: WallClock.now() + 86400))
    }
    try vault.putBatch(batch)
    return tokens
}

/// Reads every token through the daemon; returns the keys that failed.
func unreadable(_ client: TokenVaultClient, _ tokens: [ItemKey: String]) -> [String] {
    var bad: [String] = []
    for (key, token) in tokens {
        let got = try? client.token(provider: key.provider, account: key.account).accessToken
        if got != token { bad.append("\(key)") }
    }
    return bad.sorted()
}

extension SecretServiceTests {
    @Test func auto_withNoSessionBus_picksSQLiteAndSaysWhy() throws {
        let d = try DaemonUnderTest(sessionBus: nil)
        try d.start()
        let s = try d.status()
        #expect(s["backend"] as? String == "sqlite")
        let reason = s["backend_reason"] as? String ?? ""
        #expect(reason.hasPrefix("auto: no Secret Service answered on the session bus"), "reason: \(reason)")
        #expect((s["session_lock_watcher"] as? String ?? "").hasPrefix("off: no system bus"))
    }

    @Test func daemon_auto_keepsItemsInTheKeyring_servesThem_andRefusesToDowngrade() throws {
        let keyring = try PrivateKeyring.get()
        let d = try DaemonUnderTest(sessionBus: keyring.address)
        try d.start()
        var s = try d.status()
        #expect(s["backend"] as? String == "secret-service")
        #expect((s["backend_reason"] as? String ?? "").contains("a Secret Service answered"))
        let token = uniqueToken("gho_")
        try d.add("github", mode: "after-first-unlock", token: token)
        #expect(try d.vaultctl(["header", "github"]).out == "Authorization: Bearer \(token)\n")
        let marker = try #require(try StoreMarker.read(folder: d.dataFolder))
        #expect(marker.backend == .secretService)
        defer { try? SecretServiceStore(vaultID: marker.vaultID).destroy() }
        let found = try keyring.search(["vault": marker.vaultID, "provider": "github"])
        #expect(found.count == 1 && found.first?["mode"] == "after-first-unlock")
        #expect(!contains(try keyring.rawSearchOutput(["vault": marker.vaultID]), Array(token.utf8)))
        #expect(!FileManager.default.fileExists(atPath: d.dataFolder + "/vault.db"))
        #expect(!FileManager.default.fileExists(atPath: d.dataFolder + "/vault.key"))
        // Restart: served again, and deleting works through the daemon.
        d.stop()
        try d.start()
        s = try d.status()
        #expect((s["backend_reason"] as? String ?? "").contains("says the vault lives in the secret-service store"))
        #expect(try d.vaultctl(["token", "github"]).out == token + "\n")
        d.stop()
        // No session bus now: refuse rather than start an empty SQLite vault.
        var noBus = d.environment
        noBus["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(d.folder)/gone"
        let saved = d.environment
        d.environment = noBus
        let (status, log) = try d.startExpectingFailure()
        #expect(status == 69, "exit \(status): \(log)")
        #expect(log.contains("not starting an empty SQLite vault"))
        #expect(!FileManager.default.fileExists(atPath: d.dataFolder + "/vault.db"))
        // An explicit --store sqlite is refused too: the vault lives elsewhere.
        d.environment = saved
        let (explicit, explicitLog) = try d.startExpectingFailure(["--store", "sqlite"])
        #expect(explicit == 64 && explicitLog.contains("vaultctl migrate --to sqlite"), "exit \(explicit): \(explicitLog)")
        try d.start()
        #expect(try d.vaultctl(["revoke", "github", "--local-only"]).status == 0)
        #expect(try keyring.search(["vault": marker.vaultID, "provider": "github"]).isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func daemon_collectionLockedFromOutside_answersLockedFast_deletesNothing_andServesAfterUnlock() throws {
        let keyring = try PrivateKeyring.get()
        let d = try DaemonUnderTest(sessionBus: keyring.address)
        try d.start()
        defer { try? keyring.unlock() }
        let t1 = uniqueToken("wu_"), t2 = uniqueToken("afu_")
        try d.add("lock", account: "wu", mode: "when-unlocked", token: t1)
        try d.add("lock", account: "afu", mode: "after-first-unlock", token: t2)
        let vaultID = try #require(try StoreMarker.read(folder: d.dataFolder)).vaultID
        defer { try? SecretServiceStore(vaultID: vaultID).destroy() }
        let before = try keyring.search(["vault": vaultID]).count

        try keyring.lock()
        #expect(waitUntil(3) { (try? d.status()["lock_state"] as? String) == "locked" }, "the daemon follows the collection's lock")
        var clock = ContinuousClock.now
        let denied = try d.vaultctl(["header", "lock", "--account", "wu"])
        #expect(denied.status == 4, "when-unlocked answers locked: \(denied.err)")
        #expect(ContinuousClock.now - clock < .seconds(1))
        #expect(try d.vaultctl(["token", "lock", "--account", "afu"]).out == t2 + "\n", "after-first-unlock is still served")
        clock = ContinuousClock.now
        let refused = try d.vaultctl(["add", "lock", "--account", "new", "--mode", "always"], stdin: "{\"access_token\":\"x\",\"token_type\":\"bearer\"}")
        #expect(refused.status == 4 && refused.err.contains("locked"), "storing into a locked collection: \(refused.status) \(refused.err)")
        #expect(ContinuousClock.now - clock < .seconds(1))
        #expect(try d.vaultctl(["revoke", "lock", "--account", "afu", "--local-only"]).status == 4, "nothing is deleted while locked")
        #expect(try keyring.search(["vault": vaultID]).count == before)

        try keyring.unlock()
        #expect(waitUntil(3) { (try? d.status()["lock_state"] as? String) == "unlocked" })
        #expect(try d.vaultctl(["token", "lock", "--account", "wu"]).out == t1 + "\n", "served again after the unlock")
    }

    @Test(.timeLimit(.minutes(5)))
    func migrate_1000ItemsOfEveryMode_toSecretServiceAndBack_losesNothing() throws {
        let keyring = try PrivateKeyring.get()
        let d = try DaemonUnderTest(sessionBus: keyring.address)
        try FileManager.default.createDirectory(atPath: d.dataFolder, withIntermediateDirectories: true)
        let tokens = try populateSQLiteVault(d.dataFolder, count: 1000, modes: AccessMode.allCases, passphrase: "migrate-pass")
        try "migrate-pass\n".write(toFile: d.folder + "/pass", atomically: true, encoding: .utf8)
        try d.start()
        #expect(try d.status()["backend"] as? String == "sqlite", "auto keeps the vault where it is")
        #expect(try d.vaultctl(["unlock", "--passphrase-file", d.folder + "/pass"]).status == 0)

        let there = try d.vaultctl(["migrate", "--to", "secret-service", "--json"])
        #expect(there.status == 0, "\(there.err)")
        let marker = try #require(try StoreMarker.read(folder: d.dataFolder))
        defer { try? SecretServiceStore(vaultID: marker.vaultID).destroy() }
        #expect(marker.backend == .secretService)
        #expect(!FileManager.default.fileExists(atPath: d.dataFolder + "/vault.db"), "the source is removed")
        let ss = try SecretServiceStore(vaultID: marker.vaultID)
        #expect(try ss.allItems().count == 1000)
        #expect(unreadable(d.client(), tokens).isEmpty)
        // A restart opens it from the keyring.
        d.stop()
        try d.start()
        #expect(try d.vaultctl(["unlock", "--passphrase-file", d.folder + "/pass"]).status == 0)
        #expect(unreadable(d.client(), tokens).isEmpty)

        let back = try d.vaultctl(["migrate", "--to", "sqlite"])
        #expect(back.status == 0, "\(back.err)")
        #expect(back.out.hasPrefix("migrated 1000 item(s) from secret-service to sqlite"))
        #expect(try ss.found(loadSecrets: false).isEmpty, "the Secret Service items are removed")
        #expect(unreadable(d.client(), tokens).isEmpty)
        d.stop()
        try d.start()
        #expect(try d.status()["backend"] as? String == "sqlite")
        #expect(try d.vaultctl(["unlock", "--passphrase-file", d.folder + "/pass"]).status == 0)
        #expect(unreadable(d.client(), tokens).isEmpty)
    }

    @Test(.timeLimit(.minutes(5)))
    func migrate_killedHalfway_leavesTheSourceComplete_andASecondMigrationSucceeds() throws {
        let keyring = try PrivateKeyring.get()
        let d = try DaemonUnderTest(sessionBus: keyring.address)
        try FileManager.default.createDirectory(atPath: d.dataFolder, withIntermediateDirectories: true)
        let tokens = try populateSQLiteVault(d.dataFolder, count: 1000, modes: AccessMode.allCases.filter { $0 != .whenPasscodeSetThisDeviceOnly }, passphrase: nil)
        try d.start()
        let migrate = Process()
        migrate.executableURL = URL(fileURLWithPath: d.products + "/vaultctl")
        migrate.arguments = ["migrate", "--to", "secret-service"]
        migrate.environment = d.environment
        migrate.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        migrate.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try migrate.run()
        // Wait for part of the copy to land, then kill the daemon.
        var vaultID: String?
        var watcher: SecretServiceStore?
        let landed = waitUntil(90) {
            usleep(300_000)
            guard let id = vaultID ?? (try? StoreMarker.read(folder: d.dataFolder))?.vaultID else { return false }
            vaultID = id
            if watcher == nil { watcher = try? SecretServiceStore(vaultID: id, timeout: .seconds(30)) }
            return ((try? watcher?.found(loadSecrets: false).count) ?? 0) >= 100
        }
        #expect(landed)
        d.kill()
        migrate.waitUntilExit()
        #expect(migrate.terminationStatus != 0, "the migration did not report success")
        let id = try #require(vaultID)
        defer { try? SecretServiceStore(vaultID: id).destroy() }
        let partial = try SecretServiceStore(vaultID: id, timeout: .seconds(30)).found(loadSecrets: false).count
        #expect(partial < 1000 + 8, "killed before the copy was complete (\(partial) items)")

        try d.start()
        #expect(try d.status()["backend"] as? String == "sqlite", "the source is still in force")
        #expect(unreadable(d.client(), tokens).isEmpty, "and complete")
        let again = try d.vaultctl(["migrate", "--to", "secret-service"])
        #expect(again.status == 0, "\(again.err)")
        #expect(try SecretServiceStore(vaultID: id).allItems().count == 1000, "no leftovers of the first attempt")
        #expect(unreadable(d.client(), tokens).isEmpty)
    }
}

@Suite("Session-lock watcher", .serialized, .enabled(if: MockLogind.toolsPresent, "needs dbus-daemon, gdbus and python3-dbusmock (scripts/setup.sh --test)"))
struct SessionLockWatcherTests {
    @Test(.timeLimit(.minutes(1)))
    func lockedHint_locksAfterTheGracePeriod_andUnlockedHintUnlocksAgain() throws {
        let logind = try MockLogind()
        try logind.addSession("c7")
        let d = try DaemonUnderTest(sessionBus: nil, systemBus: logind.address, config: #"{"session_lock_grace_seconds": 1}"#)
        d.environment["XDG_SESSION_ID"] = "c7"
        defer { d.stop(); withExtendedLifetime(logind) {} }
        try d.start()
        #expect((try d.status()["session_lock_watcher"] as? String ?? "").hasPrefix("on: logind session /org/freedesktop/login1/session/c7"))
        let wu = uniqueToken("wu_"), afu = uniqueToken("afu_")
        try d.add("s", account: "wu", mode: "when-unlocked", token: wu)
        try d.add("s", account: "afu", mode: "after-first-unlock", token: afu)

        let locked = ContinuousClock.now
        try logind.setLockedHint("c7", true)
        usleep(300_000)
        #expect(try d.status()["lock_state"] as? String == "unlocked", "still unlocked within the grace period")
        #expect(waitUntil(5) { (try? d.status()["lock_state"] as? String) == "locked" })
        #expect(ContinuousClock.now - locked >= .milliseconds(900), "not before the grace period")
        #expect(try d.vaultctl(["header", "s", "--account", "wu"]).status == 4, "when-unlocked answers locked")
        #expect(try d.vaultctl(["token", "s", "--account", "afu"]).out == afu + "\n", "after-first-unlock is still served")

        try logind.setLockedHint("c7", false)
        #expect(waitUntil(5) { (try? d.status()["lock_state"] as? String) == "unlocked" }, "no passphrase: the session unlock unlocks the vault")
        #expect(try d.vaultctl(["token", "s", "--account", "wu"]).out == wu + "\n")

        // A lock cancelled within the grace period changes nothing; going to sleep locks at once.
        try logind.setLockedHint("c7", true)
        try logind.setLockedHint("c7", false)
        usleep(1_500_000)
        #expect(try d.status()["lock_state"] as? String == "unlocked")
        try logind.emitPrepareForSleep(true)
        #expect(waitUntil(3) { (try? d.status()["lock_state"] as? String) == "locked" })
        try logind.emitPrepareForSleep(false)
        #expect(waitUntil(3) { (try? d.status()["lock_state"] as? String) == "unlocked" })
    }

    @Test func lockedHint_withAPassphrase_waitsForVaultctlUnlock() throws {
        let logind = try MockLogind()
        try logind.addSession("c8")
        let d = try DaemonUnderTest(sessionBus: nil, systemBus: logind.address, config: #"{"session_lock_grace_seconds": 0}"#)
        d.environment["XDG_SESSION_ID"] = "c8"
        defer { d.stop(); withExtendedLifetime(logind) {} }
        try d.start()
        try "pw-1\n".write(toFile: d.folder + "/pass", atomically: true, encoding: .utf8)
        #expect(try d.vaultctl(["init", "--passphrase-file", d.folder + "/pass"]).status == 0)
        try logind.setLockedHint("c8", true)
        #expect(waitUntil(3) { (try? d.status()["lock_state"] as? String) == "locked" })
        try logind.setLockedHint("c8", false)
        usleep(500_000)
        #expect(try d.status()["lock_state"] as? String == "locked", "a passphrase vault waits for vaultctl unlock")
        #expect(try d.vaultctl(["unlock", "--passphrase-file", d.folder + "/pass"]).status == 0)
    }
}
