@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// Providers in the config: confidential clients, the client credentials
/// grant, discovery, strict decoding and SIGHUP (PRODUCT.md section 6).
extension EndToEnd {
    @Suite struct RefreshConfig {
        @Test func clientSecretBasic_secretFromStdin_refreshWorks_andTheSecretIsNeverInLogOrArgv() throws {
            let secret = "basic-secret"
            let f = try RefreshFixture(clientID: "basic-cli", provider: ["client_auth": "client_secret_basic"])
            defer { f.finish() }
            f.h.remember(secret)
            let grant = try f.server.authorizationCode(clientID: "basic-cli", secret: secret)
            try f.h.add(grant)
            let set = try f.h.vaultctl(["client-secret", "set", "test"], stdin: secret + "\n")
            #expect(set.status == 0, "\(set)")
            #expect(!set.stdout.contains(secret))
            let providers = try f.h.vaultctl(["providers", "--json"])
            #expect(providers.stdout.contains("\"has_client_secret\":true"), "\(providers)")
            #expect(!providers.stdout.contains(secret))

            let r = try f.h.vaultctl(["refresh", "test"])
            #expect(r.status == 0, "\(r)")
            let stats = try f.server.stats()
            #expect(stats.refreshSuccess == 1, "\(stats)")
            let entry = try #require(stats.log("refresh_token").last)
            #expect(entry["basic_auth"] as? Bool == true && entry["client_id"] as? String == "basic-cli", "HTTP Basic client authentication: \(entry)")
            #expect(!((entry["params"] as? [String]) ?? []).contains("client_secret"), "the secret is not in the form: \(entry)")
            let t = try f.client.token(provider: "test").accessToken
            f.h.remember(t)
            #expect(t != grant.accessToken)
            #expect(try f.server.apiMe(t) == 200)

            // Not on the daemon's command line or in its environment (the log is checked by finish()).
            for file in ["cmdline", "environ"] {
                let data = FileManager.default.contents(atPath: "/proc/\(f.h.daemonPID)/\(file)") ?? Data()
                #expect(!String(decoding: data, as: UTF8.self).contains(secret), "/proc/PID/\(file)")
            }
        }

        @Test func clientCredentialsGrant_fetchesANewTokenBeforeExpiry() throws {
            let f = try RefreshFixture(settings: ["access_token_lifetime": 3], clientID: "cc-cli",
                                       provider: ["grant": "client_credentials", "client_auth": "client_secret_basic"])
            defer { f.finish() }
            f.h.remember("cc-secret")
            #expect(try f.h.vaultctl(["client-secret", "set", "test"], stdin: "cc-secret\n").status == 0)
            let grant = try f.server.clientCredentials()
            #expect(grant.refreshToken == nil)
            try f.h.add(grant)
            try waitFor("the daemon's client_credentials request", timeout: .seconds(5)) { try f.server.stats().int("token_success", "client_credentials") >= 2 }
            let stats = try f.server.stats()
            let log = stats.log("client_credentials")
            #expect(log.count >= 2, "\(stats)")
            if log.count >= 2 {
                let issued = (log[0]["t"] as? Double ?? 0) + (log[0]["duration"] as? Double ?? 0)
                #expect((log[1]["t"] as? Double ?? .infinity) < issued + 3 - 0.5, "fetched before the first token expired: \(stats)")
                #expect(log[1]["basic_auth"] as? Bool == true)
            }
            #expect(stats.refreshRequests == 0, "no refresh grant for client credentials")
            let t = try f.client.token(provider: "test", minValidity: 1)
            f.h.remember(t.accessToken)
            #expect(t.accessToken != grant.accessToken)
            #expect(try f.server.apiMe(t.accessToken) == 200)
        }

        @Test func providersCheck_showsTheDiscoveredTokenEndpoint() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let r = try f.h.vaultctl(["providers", "--check", "--json"])
            #expect(r.status == 0, "\(r)")
            let list = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]])
            let test = try #require(list.first { $0["provider"] as? String == "test" })
            #expect(test["token_endpoint"] as? String == f.server.base + "/token", "\(test)")
            #expect(test["revocation_endpoint"] as? String == f.server.base + "/revoke", "\(test)")
            #expect(test["check"] as? String == "ok", "\(test)")
            let text = try f.h.vaultctl(["providers", "--check"])
            #expect(text.status == 0 && text.stdout.contains(f.server.base + "/token"), "\(text)")
        }

        @Test func configWithAnUnknownKey_makesTokenvaultdExit65NamingTheKeyPath() throws {
            let f = try RefreshFixture(start: false)
            defer { f.finish() }
            try f.h.writeConfig(["providers": ["test": f.server.provider(["client_sercet": "typo"])]])
            let r = try f.h.run(PackagePaths.tokenvaultd, [], timeout: .seconds(20))
            #expect(r.status == 65, "\(r)")
            #expect(r.stderr.contains("providers.test.client_sercet"), "the message names the key path: \(r)")
        }

        @Test func badSIGHUPReload_keepsTheOldConfig_andTheDaemonKeepsRefreshing() throws {
            let f = try RefreshFixture(settings: ["access_token_lifetime": 3])
            defer { f.finish() }
            try f.h.add(try f.server.authorizationCode())
            try waitFor("a first refresh", timeout: .seconds(5)) { try f.server.stats().refreshSuccess >= 1 }

            try f.h.writeConfigText(#"{"providers": {"test": {"issuer": "\#(f.server.base)", "client_id": "public-cli", "refresh_every": 1}}}"#)
            kill(f.h.daemonPID, SIGHUP)
            try waitFor("the failed reload in the log", timeout: .seconds(5)) { f.h.daemonLog.contains("config reload failed") }
            #expect(f.h.daemonLog.contains("providers.test.refresh_every"), "the log names the bad key")
            let before = try f.server.stats().refreshSuccess
            try waitFor("two more refreshes under the old config", timeout: .seconds(8)) { try f.server.stats().refreshSuccess >= before + 2 }
            let providers = try f.h.vaultctl(["providers", "--json"])
            #expect(providers.status == 0 && providers.stdout.contains("\"client_id\":\"public-cli\""), "\(providers)")
            let t = try f.client.token(provider: "test", minValidity: 1)
            f.h.remember(t.accessToken)
            #expect(try f.server.apiMe(t.accessToken) == 200)
            #expect(try f.server.stats().reuseDetected == 0)
        }
    }
}
