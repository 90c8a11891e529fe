@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// `vaultctl revoke` against a real RFC 7009 revocation endpoint (PRODUCT.md
/// section 4 "Revoke", docs/refresh.md "Revocation").
extension EndToEnd {
    @Suite struct RefreshRevocation {
        @Test func revoke_revokesAtTheProviderRefreshTokenFirst_thenDeletesTheItem() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let grant = try f.server.authorizationCode()
            try f.h.add(grant)
            let r = try f.h.vaultctl(["revoke", "test"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("revoked refresh_token and access_token"), "\(r)")
            let stats = try f.server.stats()
            #expect(stats.int("revocations", "refresh_token") >= 1 && stats.int("revocations", "access_token") >= 1, "\(stats)")
            #expect(stats.int("revocations_by_hint", "refresh_token") == 1 && stats.int("revocations_by_hint", "access_token") == 1, "\(stats)")
            #expect(try f.server.apiMe(grant.accessToken) == 401, "the provider no longer accepts the token")
            #expect(try f.h.listed() == nil, "the item is gone")
            #expect(try f.h.vaultctl(["token", "test"]).status == 3)
        }

        @Test func revoke_localOnly_doesNotCallTheProvider() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let grant = try f.server.authorizationCode()
            try f.h.add(grant)
            let r = try f.h.vaultctl(["revoke", "test", "--local-only"])
            #expect(r.status == 0, "\(r)")
            #expect(try f.server.stats().int("revocations", "total") == 0)
            #expect(try f.server.apiMe(grant.accessToken) == 200, "the token is still valid at the provider")
            #expect(try f.h.listed() == nil)
        }

        @Test func revoke_whenTheRevocationEndpointFails_exits75_andDeletesUnlessKeepOnFailure() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let grant = try f.server.authorizationCode()
            try f.h.add(grant)
            try f.server.inject(["kind": "http_503", "endpoint": "revoke"])
            let r = try f.h.vaultctl(["revoke", "test"])
            #expect(r.status == 75, "a failed remote revocation is reported: \(r)")
            #expect(r.stdout.contains("failed"), "\(r)")
            #expect(try f.h.listed() == nil, "the local delete still happened")
            #expect(try f.server.apiMe(grant.accessToken) == 200, "nothing was revoked at the provider")

            let kept = try f.server.authorizationCode()
            try f.h.add(kept)
            try f.server.inject(["kind": "http_503", "endpoint": "revoke"])
            let k = try f.h.vaultctl(["revoke", "test", "--keep-on-failure"])
            #expect(k.status == 75, "\(k)")
            #expect(k.stderr.contains("kept"), "\(k)")
            #expect(try f.h.listed() != nil, "--keep-on-failure keeps the item")
            #expect(try f.h.vaultctl(["token", "test"]).stdout == kept.accessToken + "\n")

            // Once the endpoint works again, the revocation goes through.
            #expect(try f.h.vaultctl(["revoke", "test", "--keep-on-failure"]).status == 0)
            #expect(try f.h.listed() == nil)
            #expect(try f.server.apiMe(kept.accessToken) == 401)
            #expect(try f.server.stats().int("injected_failures", "http_503") == 2)
        }
    }
}
