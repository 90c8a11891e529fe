@preconcurrency import Glibc
import VaultModel
import VaultProtocol
import VaultSystem

/// One open connection to the daemon: hello exchanged, requests sent one at a time.
/// Not thread safe: `TokenVaultClient` guards it with a mutex.
final class Connection {
    let socket: SocketConnection
    private var buffer = FrameBuffer(maxPayload: Frame.maxResponsePayload)
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    private var nextID: UInt64 = 1
    private var receiveTimeout: Int32 = 0
    let timeoutMs: Int32

    init(path: String, timeoutMs: Int32) throws(TokenVaultError) {
        self.timeoutMs = timeoutMs
        do {
            socket = try SocketConnection.connect(path: path)
        } catch {
            throw .daemonUnavailable("tokenvaultd is not running (cannot connect to \(path): \(error))")
        }
        let hello = try send(.hello, [("protocol", .number(Double(protocolVersion))), ("client", "TokenVaultClient")])
        guard hello["protocol"]?.numberValue == Double(protocolVersion) else {
            throw .protocolError("the daemon does not speak protocol \(protocolVersion)")
        }
    }

    /// The error response the daemon already sent, if one is waiting
    /// unread in the socket (read without waiting). A protocol error (such as
    /// the idle timeout closing a kept connection) is not returned: the
    /// caller then reports the daemon unavailable, and the client reconnects.
    private func pendingError(expectingID id: UInt64) -> TokenVaultError? {
        while true {
            if let payload = try? buffer.next() {
                guard let json = try? JSON.parse(payload) else { return nil }
                do { _ = try Message.result(of: json, expectingID: id) } catch {
                    return error.code == .protocolError ? nil : TokenVaultError(error)
                }
                return nil
            }
            guard (try? socket.waitReadable(timeoutMs: 0)) == true,
                  let n = try? socket.read(into: &readBuffer, offset: 0, count: readBuffer.count), n > 0 else { return nil }
            buffer.append(readBuffer[0..<n])
            for i in 0..<n { readBuffer[i] = 0 }
        }
    }

    /// Sends one request and waits for its response.
    func send(_ op: Operation, _ params: [(String, JSON)]) throws(TokenVaultError) -> JSON {
        let id = nextID
        nextID += 1
        var frame = Message.requestFrame(id: id, op: op, params)
        defer { wipe(&frame) }
        do {
            try socket.writeAll(frame, timeoutMs: timeoutMs)
        } catch {
            // The daemon may have closed the connection just after saying why
            // (another uid, too many connections): report that reason.
            if let reason = pendingError(expectingID: id) { throw reason }
            throw .daemonUnavailable("lost the connection to tokenvaultd: \(error)")
        }
        while true {
            do {
                if var response = try buffer.next() {
                    defer { wipe(&response) }
                    let json: JSON
                    do { json = try JSON.parse(response) } catch { throw TokenVaultError.protocolError("the daemon sent invalid JSON: \(error)") }
                    do { return try Message.result(of: json, expectingID: id) } catch { throw TokenVaultError(error) }
                }
            } catch let e as TokenVaultError {
                throw e
            } catch {
                throw .protocolError("the daemon sent a bad frame")
            }
            let n: Int
            do {
                guard let got = try socket.read(into: &readBuffer, count: readBuffer.count, timeoutMs: timeoutMs, currentTimeoutMs: &receiveTimeout) else {
                    throw TokenVaultError.daemonUnavailable("tokenvaultd did not answer within \(timeoutMs / 1000) s")
                }
                n = got
            } catch let e as TokenVaultError {
                throw e
            } catch {
                throw .daemonUnavailable("lost the connection to tokenvaultd: \(error)")
            }
            if n == 0 { throw .daemonUnavailable("tokenvaultd closed the connection") }
            buffer.append(readBuffer[0..<n])
            readBuffer.withUnsafeMutableBytes { wipe($0, count: n) }
        }
    }
}

/// Overwrites bytes that held a request or a response (which may carry a
/// passphrase or a token) before their memory is reused.
func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { wipe($0, count: $0.count) }
}

func wipe(_ buffer: UnsafeMutableRawBufferPointer, count: Int) {
    guard let base = buffer.baseAddress, count > 0 else { return }
    explicit_bzero(base, count)
}
