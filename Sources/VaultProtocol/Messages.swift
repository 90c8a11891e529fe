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
        requestWriter(id: id, op: op, params, framed: false).finish()
    }

    /// The frame of a request (length prefix and object), written in one buffer.
    public static func requestFrame(id: UInt64, op: Operation, _ params: [(String, JSON)] = []) -> [UInt8] {
        requestWriter(id: id, op: op, params, framed: true).finish()
    }

    private static func requestWriter(id: UInt64, op: Operation, _ params: [(String, JSON)], framed: Bool) -> JSONWriter {
        // Sized for the whole request at once: a request may carry secrets
        // (tokens, passphrases), and a buffer that grows leaves copies behind.
        let capacity = 64 + params.reduce(0) { $0 + 4 + 6 * $1.0.utf8.count + $1.1.maxSerializedCount }
        var w = JSONWriter(capacity: capacity, framed: framed)
        w.beginObject()
        w.field("id", Double(id))
        w.field("op", op.rawValue)
        // A repeated parameter keeps its last value; "id" and "op" are the envelope's.
        for (i, (k, v)) in params.enumerated() where k != "id" && k != "op" && !params[(i + 1)...].contains(where: { $0.0 == k }) {
            w.field(k, v)
        }
        w.endObject()
        return w
    }

    /// A success response: `{"id": id, "ok": true, "result": result}`.
    public static func success(id: JSON, result: JSON) -> [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.beginObject()
        w.field("id", id)
        w.field("ok", true)
        w.field("result", result)
        w.endObject()
        return w.finish()
    }

    /// A writer that has begun the frame of a success response up to its
    /// result object, which the caller writes (a token, on the hot path)
    /// and closes with two `endObject()` before `finish()`.
    public static func successFrameWriter(id: JSON, capacity: Int) -> JSONWriter {
        var w = JSONWriter(capacity: capacity, framed: true)
        w.beginObject()
        w.field("id", id)
        w.field("ok", true)
        w.beginObject("result")
        return w
    }

    /// An error response: `{"id": id, "ok": false, "error": {"code", "message"}}`.
    public static func failure(id: JSON, _ error: VaultError) -> [UInt8] {
        var w = JSONWriter(capacity: 128 + error.message.utf8.count)
        w.beginObject()
        w.field("id", id)
        w.field("ok", false)
        w.beginObject("error")
        w.field("code", error.code.rawValue)
        w.field("message", error.message)
        w.endObject()
        w.endObject()
        return w.finish()
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
