// Reading a scan in a test without holding up the test: the results gathered in the
// background, handed over on request.

import BLE
import HCI
import Synchronization

/// Reads a scan's stream in the background (letting go of the stream would stop the
/// scan) and hands over what it reported since the last look.
final class ScanReader: Sendable {
    private final class Gathered: Sendable {
        private let results = Mutex<[ScanResult]>([])
        func append(_ r: ScanResult) { results.withLock { $0.append(r) } }
        func take() -> [ScanResult] { results.withLock { r in defer { r.removeAll() }; return r } }
    }
    private let gathered = Gathered()
    private let task: Task<Void, Never>

    init(_ stream: BufferedStream<ScanResult>) {
        let gathered = self.gathered
        task = Task { for await r in stream { gathered.append(r) } }
    }

    /// What was reported since the last call, after `settling` on `host`'s loop.
    func take(after settling: Duration = .milliseconds(100), on host: BluetoothHost) async -> [ScanResult] {
        try? await host.loop.sleep(for: settling)
        return gathered.take()
    }

    /// The addresses reported since the last call.
    func addresses(after settling: Duration = .milliseconds(100), on host: BluetoothHost) async -> Set<BluetoothAddress> {
        Set(await take(after: settling, on: host).map(\.address))
    }

    deinit { task.cancel() }
}
