import Dispatch
import Synchronization
import VaultModel

/// Runs blocking calls (libsecret, D-Bus) one at a time on its own serial
/// queue, never on Swift's cooperative pool, and gives every caller an
/// answer by its deadline whatever the call does.
///
/// A call that misses its deadline keeps the queue busy until it returns by
/// itself (it is not cancelled: cancelling a Secret Service call that waits
/// on a prompt has crashed gnome-keyring); meanwhile new calls fail at once
/// with `temporary` instead of queueing behind it.
///
/// Thread safety: callable from any thread; the state is one mutex.
public final class BlockingWorker: Sendable {
    private struct State {
        var nextID = 0
        /// The call whose caller gave up waiting, while it still runs.
        var abandoned: (id: Int, what: String)?
    }

    /// Names the service in errors ("the Secret Service").
    public let serviceName: String
    private let queue: DispatchQueue
    private let state = Mutex(State())

    public init(label: String, serviceName: String) {
        self.serviceName = serviceName
        queue = DispatchQueue(label: label)
    }

    /// Runs `body` on the worker's queue and returns its result, or throws
    /// `temporary` when it has not returned within `timeout`.
    public func run<T: Sendable>(_ what: String, timeout: Duration, _ body: @escaping @Sendable () throws(VaultError) -> T) throws(VaultError) -> T {
        let id = try state.withLock { s throws(VaultError) -> Int in
            if let stuck = s.abandoned {
                throw VaultError(.temporary, "\(serviceName) has not finished an earlier call (\(stuck.what)) that timed out; try again later")
            }
            s.nextID += 1
            return s.nextID
        }
        let result = Mutex<Result<T, VaultError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        queue.async { [self] in
            let r: Result<T, VaultError>
            do throws(VaultError) { r = .success(try body()) } catch { r = .failure(error) }
            result.withLock { $0 = r }
            state.withLock { s in if s.abandoned?.id == id { s.abandoned = nil } }
            done.signal()
        }
        let c = timeout.components
        let nanos = Int(c.seconds) * 1_000_000_000 + Int(c.attoseconds / 1_000_000_000)
        if done.wait(timeout: .now() + .nanoseconds(nanos)) == .timedOut {
            // Mark it abandoned unless it finished in between.
            let finished = state.withLock { s -> Bool in
                if result.withLock({ $0 != nil }) { return true }
                s.abandoned = (id, what)
                return false
            }
            if !finished {
                throw VaultError(.temporary, "\(serviceName) did not answer within \(Self.describe(timeout)) (\(what))")
            }
        }
        switch result.withLock({ $0 }) {
        case .success(let value)?: return value
        case .failure(let error)?: throw error
        case nil: throw VaultError(.failure, "\(serviceName): \(what) ended without a result")
        }
    }

    static func describe(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(ms) ms"
    }
}
