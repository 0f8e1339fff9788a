// How a reader thread hands work to an event loop with back-pressure: at most
// `window` pieces wait on the loop; the next hand-off blocks the reader (which then
// reads nothing more, so the kernel's buffers and the peer's flow control hold the
// rest). The descriptor transports and the kernel ATT socket use it.

import Dispatch
import NIOCore

public final class LoopWindow: Sendable {
    public let loop: any EventLoop
    private let slots: DispatchSemaphore

    public init(loop: any EventLoop, window: Int = 8) {
        self.loop = loop
        self.slots = DispatchSemaphore(value: Swift.max(1, window))
    }

    /// Runs `work` on the loop, in call order; from the reader thread, never the loop.
    public func hand(_ work: @escaping @Sendable () -> Void) {
        slots.wait()
        let slots = self.slots
        loop.execute {
            work()
            slots.signal()
        }
    }
}
