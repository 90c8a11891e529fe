import Foundation
import Testing
import VaultOAuth

/// PKCE and the authorization request (RFC 7636, RFC 6749 section 4.1.1).
@Suite struct LoginTests {
    /// RFC 7636 appendix B: the verifier is the base64url of the appendix's
    /// 32 octets, and its S256 challenge is the appendix's challenge.
    @Test func pkceChallenge_ofRFC7636AppendixBVerifier_isTheAppendixChallenge() {
        let octets: [UInt8] = [116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186,
                               22, 212, 37, 77, 105, 214, 191, 240, 91, 88, 5, 88, 83, 132, 141, 121]
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(Data(octets).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                    .replacingOccurrences(of: "=", with: "") == verifier)
        #expect(PKCE.challenge(of: verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func pkce_newPair_isA43CharacterUnreservedVerifierWithItsS256Challenge() {
        let a = PKCE(), b = PKCE()
        // Section 4.1: 43 to 128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~".
        let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        #expect(a.verifier.count == 43 && a.verifier.allSatisfy(unreserved.contains), "\(a.verifier)")
        #expect(a.method == "S256")
        #expect(a.challenge == PKCE.challenge(of: a.verifier))
        #expect(a.verifier != b.verifier, "each login gets a fresh verifier")
    }

    @Test func authorizationURL_carriesTheS256ChallengeStateAndRedirect() throws {
        let profile = ProviderProfile(name: "example", clientID: "my cli", scopes: ["read", "write"],
                                      authorizationParams: ["prompt": "consent"],
                                      authorizationEndpoint: "https://auth.example.com/authorize?tenant=a")
        let pkce = PKCE()
        let url = try TokenEndpointClient.authorizationURL(profile, redirectURI: "http://127.0.0.1:5000/callback", state: "s-1", pkce: pkce)
        #expect(url.hasPrefix("https://auth.example.com/authorize?tenant=a&"), "an endpoint's own query is kept: \(url)")
        // The query is application/x-www-form-urlencoded (RFC 6749 appendix B): `+` is a space.
        let query = try #require(url.split(separator: "?", maxSplits: 1).last)
        var q: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map { $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            q[kv[0]] = kv.count > 1 ? kv[1] : ""
        }
        #expect(q["response_type"] == "code")
        #expect(q["client_id"] == "my cli")
        #expect(q["redirect_uri"] == "http://127.0.0.1:5000/callback")
        #expect(q["scope"] == "read write")
        #expect(q["state"] == "s-1")
        #expect(q["code_challenge"] == pkce.challenge)
        #expect(q["code_challenge_method"] == "S256")
        #expect(q["prompt"] == "consent")
        #expect(q["code_verifier"] == nil && !url.contains(pkce.verifier), "the verifier never leaves in the URL")
    }
}
