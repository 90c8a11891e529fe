import Testing
import VaultDaemon
import VaultModel

@Suite struct ConfigTests {
    func parse(_ text: String) throws(VaultError) -> Config {
        try Config.parse(Array(text.utf8), source: "test.json")
    }

    func error(_ text: String) -> VaultError? {
        do { _ = try parse(text); return nil } catch { return error }
    }

    @Test func parse_specExample_decodesEveryField() throws {
        let c = try parse("""
            {"store": "sqlite", "providers": {
              "github": {"preset": "github", "client_id": "Iv1.0123"},
              "example": {"issuer": "https://auth.example.com", "token_endpoint": "https://auth.example.com/token",
                          "revocation_endpoint": "https://auth.example.com/revoke", "client_id": "my-cli",
                          "client_auth": "client_secret_basic", "scopes": ["read", "write"],
                          "default_mode": "when-unlocked", "allowed_clients": ["/usr/bin/curl"],
                          "assume_lifetime_seconds": 3600, "token_headers": {"Accept": "application/json"}}}}
            """)
        #expect(c.store == .sqlite)
        #expect(c.providers["github"]?.preset == "github")
        let e = try #require(c.providers["example"])
        #expect(e.defaultMode == .whenUnlocked)
        #expect(e.scopes == ["read", "write"])
        #expect(e.allowedClients == ["/usr/bin/curl"])
        #expect(e.assumeLifetimeSeconds == 3600)
        #expect(e.tokenHeaders["Accept"] == "application/json")
    }

    @Test func parse_unknownProviderKey_namesTheKeyPath() {
        let e = error(#"{"providers": {"github": {"client_idd": "x"}}}"#)
        #expect(e?.code == .badInput)
        #expect(e?.message.contains("providers.github.client_idd") == true)
        #expect(e?.message.contains("unknown key") == true)
    }

    @Test func parse_unknownTopLevelKey_isAnError() {
        #expect(error(#"{"stor": "auto"}"#)?.message.contains("stor: unknown key") == true)
    }

    @Test func parse_wrongType_namesTheKeyPathAndType() {
        let e = error(#"{"providers": {"x": {"scopes": "read"}}}"#)
        #expect(e?.message.contains("providers.x.scopes") == true)
        #expect(e?.message.contains("array") == true)
        let n = error(#"{"providers": {"x": {"scopes": ["a", 3]}}}"#)
        #expect(n?.message.contains("providers.x.scopes[1]") == true)
    }

    @Test func parse_httpEndpoint_refusedUnlessLoopback() throws {
        #expect(error(#"{"providers": {"x": {"token_endpoint": "http://auth.example.com/token"}}}"#)?.message.contains("loopback") == true)
        let c = try parse(#"{"providers": {"x": {"token_endpoint": "http://127.0.0.1:8080/token", "revocation_endpoint": "http://[::1]:9/r"}}}"#)
        #expect(c.providers["x"]?.tokenEndpoint == "http://127.0.0.1:8080/token")
        #expect(error(#"{"providers": {"x": {"token_endpoint": "ftp://x"}}}"#) != nil)
    }

    @Test func parse_badEnumValues_areErrors() {
        #expect(error(#"{"store": "keyring"}"#)?.message.contains("store") == true)
        #expect(error(#"{"providers": {"x": {"default_mode": "sometimes"}}}"#)?.message.contains("providers.x.default_mode") == true)
        #expect(error(#"{"providers": {"x": {"grant": "password"}}}"#)?.message.contains("providers.x.grant") == true)
        #expect(error(#"{"providers": {"x": {"preset": "myspace"}}}"#)?.message.contains("unknown preset") == true)
        #expect(error(#"{"providers": {"x": {"allowed_clients": ["curl"]}}}"#)?.message.contains("absolute") == true)
    }

    @Test func parse_malformedJSON_isBadInputWithOffset() {
        let e = error(#"{"store": "auto",}"#)
        #expect(e?.code == .badInput)
        #expect(e?.message.contains("byte") == true)
    }

    @Test func load_missingFile_isEmptyConfig() throws {
        let c = try Config.load(path: "/nonexistent/tokenvault/config.json")
        #expect(c.providers.isEmpty)
        #expect(c.store == .auto)
    }
}
