import Foundation
import Testing

/// Access modes through the daemon, across lock, unlock, restarts and
/// passphrase changes (PRODUCT.md section 3).
extension EndToEnd {
    @Suite struct AccessModes {
        /// One item per mode, and when each may be read.
        static let modes: [(mode: String, availability: String)] = [
            ("when-unlocked", "when-unlocked"),
            ("after-first-unlock", "after-first-unlock"),
            ("always", "always"),
            ("when-passcode-set-this-device-only", "when-unlocked"),
            ("when-unlocked-this-device-only", "when-unlocked"),
            ("after-first-unlock-this-device-only", "after-first-unlock"),
            ("always-this-device-only", "always"),
        ]

        /// Checks every item in `tokens` is served, or refused with exit 4 and
        /// listed `locked`, as `served(availability)` says.
        static func expectServing(_ h: DaemonHarness, _ tokens: [String: String], when: String,
                                  served: (String) -> Bool, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let listed = try h.listJSON()
            for (mode, availability) in modes {
                guard let token = tokens[mode] else { continue }
                let r = try h.vaultctl(["token", "m-" + mode])
                let state = listed.first { $0["provider"] as? String == "m-" + mode }?["state"] as? String
                if served(availability) {
                    #expect(r.status == 0 && r.stdout == token + "\n", "\(when): \(mode) is served: \(r)", sourceLocation: sourceLocation)
                    #expect(state == "valid", "\(when): \(mode) is listed valid", sourceLocation: sourceLocation)
                } else {
                    #expect(r.status == 4, "\(when): \(mode) is refused as locked: \(r)", sourceLocation: sourceLocation)
                    #expect(r.stdout.isEmpty && !r.stderr.contains(token), sourceLocation: sourceLocation)
                    #expect(state == "locked", "\(when): \(mode) is listed locked", sourceLocation: sourceLocation)
                }
            }
        }

        @Test func modes_followLockUnlockRestartAndPassphraseChanges() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            let first = try h.newPassphraseFile("first")
            let second = try h.newPassphraseFile("second")

            let created = try h.vaultctl(["init", "--passphrase-file", first])
            #expect(created.status == 0, "\(created)")
            var status = try h.statusJSON()
            #expect(status["has_passphrase"] as? Bool == true)
            #expect(status["lock_state"] as? String == "unlocked")

            var tokens: [String: String] = [:]
            for (mode, _) in Self.modes { tokens[mode] = try h.addToken("m-" + mode, mode: mode) }
            for item in try h.listJSON() {
                #expect(item["mode"] as? String == (item["provider"] as? String).map { String($0.dropFirst(2)) }, "\(item)")
            }
            try Self.expectServing(h, tokens, when: "unlocked") { _ in true }

            // Locked: only when-unlocked* items become unavailable.
            #expect(try h.vaultctl(["lock"]).status == 0)
            #expect(try h.statusJSON()["lock_state"] as? String == "locked")
            try Self.expectServing(h, tokens, when: "locked") { $0 != "when-unlocked" }
            #expect(try h.vaultctl(["unlock", "--passphrase-file", second]).status == 77)
            #expect(try h.vaultctl(["unlock", "--passphrase-file", first]).status == 0)
            try Self.expectServing(h, tokens, when: "unlocked again") { _ in true }

            // Restart: before the first unlock only always* items are served.
            try h.restart()
            status = try h.statusJSON()
            #expect(status["lock_state"] as? String == "locked-since-start")
            try Self.expectServing(h, tokens, when: "after a restart") { $0 == "always" }
            // Locking before the first unlock changes nothing.
            #expect(try h.vaultctl(["lock"]).status == 0)
            try Self.expectServing(h, tokens, when: "locked since start") { $0 == "always" }
            #expect(try h.vaultctl(["unlock", "--passphrase-file", first]).status == 0)
            try Self.expectServing(h, tokens, when: "unlocked after the restart") { _ in true }
            // Locked after the first unlock: after-first-unlock* stay.
            #expect(try h.vaultctl(["lock"]).status == 0)
            try Self.expectServing(h, tokens, when: "locked after the first unlock") { $0 != "when-unlocked" }
            #expect(try h.vaultctl(["unlock", "--passphrase-file", first]).status == 0)

            // A new passphrase survives a restart; the old one no longer opens the vault.
            let change = try h.vaultctl(["passphrase", "change", "--old-passphrase-file", first, "--passphrase-file", second])
            #expect(change.status == 0, "\(change)")
            try h.restart()
            try Self.expectServing(h, tokens, when: "after the passphrase change and a restart") { $0 == "always" }
            #expect(try h.vaultctl(["unlock", "--passphrase-file", first]).status == 77)
            try Self.expectServing(h, tokens, when: "after the old passphrase was refused") { $0 == "always" }
            #expect(try h.vaultctl(["unlock", "--passphrase-file", second]).status == 0)
            try Self.expectServing(h, tokens, when: "unlocked with the new passphrase") { _ in true }

            // Removing the passphrase deletes when-passcode-set-this-device-only items, and only those.
            #expect(try h.vaultctl(["passphrase", "remove", "--passphrase-file", first]).status == 77)
            let removed = try h.vaultctl(["passphrase", "remove", "--passphrase-file", second])
            #expect(removed.status == 0, "\(removed)")
            #expect(try h.statusJSON()["has_passphrase"] as? Bool == false)
            let providers = Set(try h.listJSON().compactMap { $0["provider"] as? String })
            #expect(!providers.contains("m-when-passcode-set-this-device-only"))
            #expect(providers.count == Self.modes.count - 1)
            #expect(try h.vaultctl(["token", "m-when-passcode-set-this-device-only"]).status == 3)
            tokens["when-passcode-set-this-device-only"] = nil
            try Self.expectServing(h, tokens, when: "after the passphrase was removed") { _ in true }
            let refused = try h.vaultctl(["add", "again", "--mode", "when-passcode-set-this-device-only"], stdin: h.tokenJSON(h.newToken()))
            #expect(refused.status == 4, "that mode needs a passphrase: \(refused)")

            // Without a passphrase the first unlock is the start.
            try h.restart()
            #expect(try h.statusJSON()["lock_state"] as? String == "unlocked")
            try Self.expectServing(h, tokens, when: "restarted without a passphrase") { _ in true }
        }
    }
}
