import Testing
import VaultModel

@Suite struct TokenResponseTests {
    func validate(_ text: String) throws(VaultError) -> TokenResponse {
        let json: JSON
        do { json = try JSON.parse(text) } catch { throw VaultError(.badInput, "\(error)") }
        return try TokenResponse(validating: json)
    }

    @Test func bearerInAnyCase_unknownFieldsKept() throws {
        let r = try validate(#"{"access_token":"a","token_type":"BeArEr","expires_in":"3600","x_custom":{"k":1}}"#)
        #expect(r.tokenType == "Bearer")
        #expect(r.expiresIn == 3600)
        #expect(r.fields["x_custom"] != nil)
    }

    @Test func missingExpiresIn_meansUnknownExpiry() throws {
        #expect(try validate(#"{"access_token":"a","token_type":"bearer","scope":"repo,gist"}"#).expiresIn == nil)
    }

    @Test(arguments: [
        (#"{"token_type":"bearer"}"#, "no access_token"),
        (#"{"access_token":"","token_type":"bearer"}"#, "access_token"),
        (#"{"access_token":"a"}"#, "no token_type"),
        (#"{"access_token":"a","token_type":"mac"}"#, "only Bearer"),
        (#"{"access_token":"a","token_type":"bearer","expires_in":-5}"#, "expires_in"),
        (#"{"access_token":"a","token_type":"bearer","expires_in":true}"#, "expires_in"),
        (#"{"access_token":"a","token_type":"bearer","refresh_token":5}"#, "refresh_token"),
        (#"{"error":"invalid_grant","error_description":"bad"}"#, "OAuth error: invalid_grant"),
        (#"["access_token"]"#, "JSON object"),
    ])
    func invalidResponses_areBadInputNamingTheField(text: String, expected: String) {
        do {
            _ = try validate(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.code == .badInput)
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    @Test func errorMessages_neverContainTheTokenValue() {
        do {
            _ = try validate(#"{"access_token":"SECRET-VALUE-123","token_type":"SECRET-TYPE"}"#)
        } catch {
            #expect(!error.message.contains("SECRET-VALUE-123"))
        }
    }
}
