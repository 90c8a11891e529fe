import Foundation
import Testing

/// `vaultctl` as a user or a script drives it (PRODUCT.md sections 4 and 5).
extension EndToEnd {
    @Suite struct Vaultctl {
        @Test func addFromStdin_thenListTokenHeaderRevoke_thenTokenIsNotFound() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()

            let token = h.newToken()
            let add = try h.vaultctl(["add", "github", "--account", "octo"], stdin: h.tokenJSON(token, expiresIn: 3600, refreshToken: h.newToken("refresh")))
            #expect(add.status == 0, "\(add)")
            #expect(add.stdout.contains("github/octo"))
            #expect(!add.stdout.contains(token))
            // An item without expires_in has an unknown expiry.
            let forever = try h.addToken("gitlab", expiresIn: nil)

            let text = try h.vaultctl(["list"])
            #expect(text.status == 0, "\(text)")
            let rows = text.stdout.split(separator: "\n").map(String.init)
            #expect(rows.first?.hasPrefix("PROVIDER") == true, "list prints a header: \(text.stdout)")
            let githubRow = try #require(rows.first { $0.hasPrefix("github ") }, "list shows github: \(text.stdout)")
            #expect(githubRow.contains("octo") && githubRow.contains("after-first-unlock") && githubRow.contains("valid"))
            #expect(!text.stdout.contains(token) && !text.stdout.contains(forever), "list never shows a token")

            let items = try h.listJSON()
            #expect(items.count == 2)
            for item in items {
                for key in ["provider", "account", "mode", "state", "expires_at", "backend"] {
                    #expect(item[key] != nil, "list --json item has \(key): \(item)")
                }
                #expect(item["backend"] as? String == "sqlite")
                #expect(item["state"] as? String == "valid")
                #expect(item["mode"] as? String == "after-first-unlock")
            }
            let github = try #require(items.first { $0["provider"] as? String == "github" })
            #expect(github["account"] as? String == "octo")
            let expiresText = try #require(github["expires_at"] as? String, "expires_at is RFC 3339 text: \(github)")
            let expires = try #require(ISO8601DateFormatter().date(from: expiresText), "expires_at \(expiresText) is RFC 3339")
            #expect(abs(expires.timeIntervalSinceNow - 3600) < 120, "expires_at is about an hour from now: \(expiresText)")
            let gitlab = try #require(items.first { $0["provider"] as? String == "gitlab" })
            #expect(gitlab["account"] as? String == "default")
            #expect(gitlab["expires_at"] is NSNull, "unknown expiry is null: \(gitlab)")

            let printed = try h.vaultctl(["token", "github", "--account", "octo"])
            #expect(printed.status == 0, "\(printed)")
            #expect(printed.stdout == token + "\n")
            let header = try h.vaultctl(["header", "github", "--account", "octo"])
            #expect(header.status == 0, "\(header)")
            #expect(header.stdout == "Authorization: Bearer \(token)\n")
            #expect(try h.vaultctl(["token", "gitlab"]).stdout == forever + "\n")

            let revoke = try h.vaultctl(["revoke", "github", "--account", "octo"])
            #expect(revoke.status == 0, "\(revoke)")
            let gone = try h.vaultctl(["token", "github", "--account", "octo"])
            #expect(gone.status == 3, "a revoked item is not found: \(gone)")
            #expect(gone.stdout.isEmpty)
            #expect(try h.listJSON().map { $0["provider"] as? String } == ["gitlab"])
            // The other item is untouched.
            #expect(try h.vaultctl(["header", "gitlab"]).stdout == "Authorization: Bearer \(forever)\n")
        }

        @Test func errorPaths_exitWithTheDocumentedCodes() throws {
            let h = try DaemonHarness()
            defer { h.finish() }

            // 69: nobody listens yet.
            let noDaemon = try h.vaultctl(["token", "github"])
            #expect(noDaemon.status == 69, "\(noDaemon)")
            #expect(noDaemon.stderr.contains("not running"))
            #expect(try h.vaultctl(["status"]).status == 69)

            try h.start()
            // 64: usage errors, before anything is sent.
            for args in [["frobnicate"], ["list", "--bogus"], ["token"], ["token", "a", "b"], ["token", "github", "--min-validity", "soon"],
                         ["add", "github", "--mode", "sometimes"], ["passphrase", "juggle"], []] {
                let r = try h.vaultctl(args)
                #expect(r.status == 64, "vaultctl \(args.joined(separator: " ")): \(r)")
            }
            // 65: bad token responses on stdin; nothing is stored.
            let badInputs = [
                "{\"access_token\": ",
                "not json at all",
                h.tokenJSON(nil),
                h.tokenJSON(h.newToken(), tokenType: "mac"),
                "{\"error\":\"invalid_grant\"}",
                "[1, 2, 3]",
            ]
            for input in badInputs {
                let r = try h.vaultctl(["add", "github"], stdin: input)
                #expect(r.status == 65, "add with \(input.debugDescription): \(r)")
            }
            #expect(try h.listJSON().isEmpty, "a rejected token response stores nothing")

            // 3: no such provider.
            let unknown = try h.vaultctl(["token", "nosuchprovider"])
            #expect(unknown.status == 3, "\(unknown)")
            #expect(try h.vaultctl(["revoke", "nosuchprovider"]).status == 3)
            #expect(try h.vaultctl(["header", "nosuchprovider"]).status == 3)

            // 5: expired, and no way to refresh.
            let validForAnHour = try h.addToken("hourly", expiresIn: 3600)
            let tooShort = try h.vaultctl(["token", "hourly", "--min-validity", "7200"])
            #expect(tooShort.status == 5, "a token that expires before --min-validity is refused: \(tooShort)")
            #expect(tooShort.stdout.isEmpty)
            #expect(try h.vaultctl(["token", "hourly", "--min-validity", "60"]).stdout == validForAnHour + "\n")
            try h.addToken("brief", expiresIn: 1)
            try waitFor("the one-second token to be listed as expired", timeout: .seconds(10), every: .milliseconds(100)) {
                try h.state(of: "brief") == "expired"
            }
            let expired = try h.vaultctl(["token", "brief"])
            #expect(expired.status == 5, "\(expired)")
            #expect(expired.stdout.isEmpty)

            // 4 and 77: a vault with a passphrase, locked.
            let passphrase = try h.newPassphraseFile("pass")
            let wrong = try h.newPassphraseFile("wrong")
            #expect(try h.vaultctl(["passphrase", "set", "--passphrase-file", passphrase]).status == 0)
            try h.addToken("guarded", mode: "when-unlocked")
            #expect(try h.vaultctl(["lock"]).status == 0)
            let locked = try h.vaultctl(["token", "guarded"])
            #expect(locked.status == 4, "\(locked)")
            #expect(locked.stdout.isEmpty)
            #expect(try h.vaultctl(["header", "guarded"]).status == 4)
            let denied = try h.vaultctl(["unlock", "--passphrase-file", wrong])
            #expect(denied.status == 77, "wrong passphrase: \(denied)")
            #expect(try h.vaultctl(["token", "guarded"]).status == 4, "a wrong passphrase unlocks nothing")
            #expect(try h.vaultctl(["passphrase", "change", "--old-passphrase-file", wrong, "--passphrase-file", wrong]).status == 77)
            #expect(try h.vaultctl(["unlock", "--passphrase-file", passphrase]).status == 0)
            #expect(try h.vaultctl(["token", "guarded"]).status == 0)

            // 1: any other failure (a second vault over an existing one).
            #expect(try h.vaultctl(["init", "--no-passphrase"]).status == 1)

            // Daemon gone again: 69.
            try h.stop()
            #expect(try h.vaultctl(["list"]).status == 69)
        }

        @Test func help_listsEveryExitCode() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            let help = try h.vaultctl(["--help"])
            #expect(help.status == 0, "\(help)")
            let lines = help.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            let documented: [(Int, String)] = [(0, "done"), (1, "failure"), (3, "no such"), (4, "locked"), (5, "re-authentication"),
                                               (64, "usage"), (65, "bad input"), (69, "unavailable"), (75, "temporary"), (77, "denied")]
            for (code, meaning) in documented {
                #expect(lines.contains { $0.hasPrefix("\(code) ") && $0.contains(meaning) }, "--help documents exit \(code) (\(meaning)):\n\(help.stdout)")
            }
            // Every verb's help carries them too.
            let verbHelp = try h.vaultctl(["token", "--help"])
            #expect(verbHelp.status == 0 && verbHelp.stdout.contains("77"))
        }

        @Test func socketOption_worksBeforeAndAfterTheVerb() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("github")
            #expect(try h.vaultctl(["token", "github", "--socket", h.socketPath]).stdout == token + "\n")
            #expect(try h.vaultctl(["token", "--socket=\(h.socketPath)", "github"]).stdout == token + "\n")
            #expect(try h.vaultctl(["--socket", h.socketPath, "token", "github"]).stdout == token + "\n")
            #expect(try h.vaultctl(["--socket=\(h.socketPath)", "token", "github"]).stdout == token + "\n")
            #expect(try h.vaultctl(["--socket", h.folder + "/nothing-here", "token", "github"]).status == 69)
            #expect(try h.vaultctl(["--socket"]).status == 64)
        }
    }
}
