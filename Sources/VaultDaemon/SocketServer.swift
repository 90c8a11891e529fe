@preconcurrency import Glibc
import Synchronization
import VaultCrypto
import VaultModel
import VaultProtocol
import VaultSystem

/// Serves the protocol on a listening Unix socket: one thread per
/// connection (a connection spends its life in `poll`, and a blocking
/// vault write or an Argon2id unlock then stalls only its own client).
///
/// Every peer's uid is checked with `SO_PEERCRED`. A peer that sends a bad
/// frame, invalid JSON or a frame too slowly gets an error frame and is
/// closed; idle connections are closed after `idleTimeoutMs`.
public final class SocketServer: Sendable {
    /// Limits that protect the daemon from bad or greedy peers.
    public struct Limits: Sendable {
        public var maxConnections = 512
        /// A connection with no request for this long is closed.
        public var idleTimeoutMs: Int32 = 600_000
        /// A frame must be complete this long after its first byte.
        public var frameTimeoutMs: Int32 = 5_000
        /// Sending a response may take at most this long.
        public var sendTimeoutMs: Int32 = 5_000

        public init() {}
    }

    private enum Phase { case running, stopping }

    private struct State {
        var phase: Phase = .running
        var connections: [Int32: SocketConnection] = [:]
    }

    let listener: UnixListener
    let service: VaultService
    let logger: Logger
    let limits: Limits
    private let wake: WakePipe
    private let state = Mutex(State())
    private let uid = getuid()

    public init(listener: UnixListener, service: VaultService, logger: Logger, limits: Limits = Limits()) throws(SystemError) {
        self.listener = listener
        self.service = service
        self.logger = logger
        self.limits = limits
        self.wake = try WakePipe()
    }

    /// Accepts connections until `stop()`; runs on the calling thread.
    public func run() {
        while state.withLock({ $0.phase == .running }) {
            let conn: SocketConnection?
            do { conn = try listener.accept(wake: wake) } catch {
                logger.error("accept failed: \(error)")
                usleep(100_000)
                continue
            }
            guard let conn else { continue }
            admit(conn)
        }
    }

    private func admit(_ conn: SocketConnection) {
        let peer: PeerCredentials
        do { peer = try conn.peerCredentials() } catch {
            logger.warning("refused a connection: \(error)")
            return
        }
        guard peer.uid == uid else {
            logger.warning("refused a connection from uid \(peer.uid) (pid \(peer.pid)): only uid \(uid) may connect")
            reject(conn, VaultError(.denied, "only uid \(uid) may use this daemon"))
            return
        }
        let admitted = state.withLock { s -> Bool in
            guard s.phase == .running, s.connections.count < limits.maxConnections else { return false }
            s.connections[conn.fd] = conn
            return true
        }
        guard admitted else {
            logger.warning("refused a connection from pid \(peer.pid): \(limits.maxConnections) connections open")
            reject(conn, VaultError(.temporary, "too many connections; try again later"))
            return
        }
        let p = Peer(pid: peer.pid, uid: peer.uid, executable: peer.executablePath, connection: conn)
        do {
            try spawnThread { [self] in
                serve(conn, peer: p)
                state.withLock { _ = $0.connections.removeValue(forKey: conn.fd) }
            }
        } catch {
            state.withLock { _ = $0.connections.removeValue(forKey: conn.fd) }
            logger.error("cannot start a connection thread: \(error)")
        }
    }

    private func reject(_ conn: SocketConnection, _ error: VaultError) {
        try? conn.writeAll(Frame.encode(Message.failure(id: .null, error)), timeoutMs: 100)
    }

    /// Reads frames, answers each, until the peer closes, misbehaves, idles
    /// out, or the daemon stops.
    private func serve(_ conn: SocketConnection, peer: Peer) {
        var frames = FrameBuffer()
        var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
        var helloDone = false
        var frameStarted: ContinuousClock.Instant?
        var receiveTimeout: Int32 = 0
        defer { frames.wipe() }
        func close(_ error: VaultError) {
            logger.info("closing connection of pid \(peer.pid): \(error.message)")
            try? conn.writeAll(Frame.encode(Message.failure(id: .null, error)), timeoutMs: 100)
        }
        while true {
            // Answer every complete frame already buffered (pipelined requests).
            while true {
                let payload: [UInt8]?
                do { payload = try frames.next() } catch {
                    if case .badLength(let n) = error {
                        close(VaultError(.protocolError, "frame length \(n) is out of range (1…\(Frame.maxPayload))"))
                    }
                    return
                }
                guard var payload else { break }
                frameStarted = frames.hasPartialFrame ? .now : nil
                let json: JSON
                do { json = try JSON.parse(payload) } catch {
                    secureZero(&payload)
                    close(VaultError(.protocolError, "request is not valid JSON: \(error)"))
                    return
                }
                secureZero(&payload)
                guard let request = json.objectValue, let id = request["id"], id.numberValue != nil else {
                    close(VaultError(.protocolError, "request must be a JSON object with a numeric \"id\""))
                    return
                }
                if !helloDone {
                    guard request["op"]?.stringValue == Operation.hello.rawValue else {
                        close(VaultError(.protocolError, "the first request must be \"hello\""))
                        return
                    }
                    guard let versions = request["protocol"]?.numberValue, versions == Double(protocolVersion) else {
                        close(VaultError(.protocolError, "unsupported protocol version; this daemon speaks \(protocolVersion)"))
                        return
                    }
                    helloDone = true
                }
                var frame = service.handle(request, id: id, peer: peer)
                defer { secureZero(&frame) }
                do { try conn.writeAll(frame, timeoutMs: limits.sendTimeoutMs) } catch { return }
            }
            // Wait for more bytes: a started frame must finish in time; an idle connection may wait longer.
            let timeout: Int32
            if let started = frameStarted {
                let elapsed = started.duration(to: .now)
                let left = Int64(limits.frameTimeoutMs) - elapsed.components.seconds * 1000 - elapsed.components.attoseconds / 1_000_000_000_000_000
                if left <= 0 {
                    close(VaultError(.protocolError, "frame not completed within \(limits.frameTimeoutMs / 1000) s"))
                    return
                }
                timeout = Int32(left)
            } else {
                timeout = limits.idleTimeoutMs
            }
            let n: Int
            do {
                guard let got = try conn.read(into: &readBuffer, count: readBuffer.count, timeoutMs: max(timeout, 1), currentTimeoutMs: &receiveTimeout) else {
                    if frameStarted == nil {
                        close(VaultError(.protocolError, "idle for \(limits.idleTimeoutMs / 1000) s"))
                        return
                    }
                    continue
                }
                n = got
            } catch {
                return
            }
            if n == 0 { return }
            frames.append(readBuffer[0..<n])
            for i in 0..<n { readBuffer[i] = 0 }
            if frameStarted == nil && frames.hasPartialFrame { frameStarted = .now }
        }
    }

    /// Number of open connections.
    public var connectionCount: Int { state.withLock { $0.connections.count } }

    /// Stops accepting and ends every connection's reading side: requests in
    /// flight finish and get their answer, then the threads end.
    public func stop() {
        let conns = state.withLock { s -> [SocketConnection] in
            s.phase = .stopping
            return Array(s.connections.values)
        }
        wake.wake()
        for c in conns { c.shutdownRead() }
    }

    /// Waits until every connection thread has ended, at most `timeoutMs`.
    public func waitForConnections(timeoutMs: Int) -> Bool {
        var waited = 0
        while connectionCount > 0 {
            if waited >= timeoutMs { return false }
            usleep(10_000)
            waited += 10
        }
        return true
    }
}
