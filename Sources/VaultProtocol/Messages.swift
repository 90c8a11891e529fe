import VaultModel

/// The protocol version this build speaks.
public let protocolVersion = 1

/// Operation names on the wire (docs/protocol.md).
public enum Operation: String, Sendable, CaseIterable {
    case hello
    case token
    case list
    case add
    case revoke
    case report401 = "report_401"
    case lock
    case unlock
    case initialize = "init"
    case passphraseSet = "passphrase_set"
    case passphraseChange = "passphrase_change"
    case passphraseRemove = "passphrase_remove"
    case status
    case refresh
    case clientSecretSet = "client_secret_set"
    case providers
    case loginStart = "login_start"
    case loginWait = "login_wait"
    case loginCancel = "login_cancel"
    /// Moves the vault to the other store.
    case migrate
}

/// Building and reading the JSON objects of requests and responses.
public enum Message {
    /// A request object: `{"id": id, "op": op, …params}`.
    public static func request(id: UInt64, op: Operation, _ params: [(String, JSON)] = []) -> [UInt8] {
        var o = JSONObject([("id", .number(Double(id))), ("op", .string(op.rawValue))])
        for (k, v) in params { o[k] = v }
        return JSON.object(o).serialized()
    }

    /// A success response: `{"id": id, "ok": true, "result": result}`.
    public static func success(id: JSON, result: JSON) -> [UInt8] {
        JSON.object(JSONObject([("id", id), ("ok", true), ("result", result)])).serialized()
    }

    /// An error response: `{"id": id, "ok": false, "error": {"code", "message"}}`.
    public static func failure(id: JSON, _ error: VaultError) -> [UInt8] {
        let e = JSONObject([("code", .string(error.code.rawValue)), ("message", .string(error.message))])
        return JSON.object(JSONObject([("id", id), ("ok", false), ("error", .object(e))])).serialized()
    }

    /// Reads a response: the result, or the error it carries.
    public static func result(of response: JSON, expectingID id: UInt64) throws(VaultError) -> JSON {
        guard let o = response.objectValue else { throw VaultError(.protocolError, "response is not a JSON object") }
        // An error about the connection itself (another uid, too many
        // connections, a bad frame) carries id null: the daemon sends it
        // before it closes the connection, whatever request is pending.
        let connectionError = o["id"]?.isNull == true && o["ok"]?.boolValue == false
        guard connectionError || o["id"]?.numberValue == Double(id) else {
            throw VaultError(.protocolError, "response id does not match request \(id)")
        }
        if o["ok"]?.boolValue == true { return o["result"] ?? .null }
        guard let e = o["error"]?.objectValue, let codeText = e["code"]?.stringValue else {
            throw VaultError(.protocolError, "error response without an error object")
        }
        let code = VaultError.Code(rawValue: codeText) ?? .failure
        throw VaultError(code, e["message"]?.stringValue ?? codeText)
    }
}
