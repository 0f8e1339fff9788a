// The seeds of the seeded hostile tests (a peer, a controller, a host that lies): the
// same seed, the same lies, so a failure names its seed and replays.

import Foundation

public enum HostileSeeds {
    /// Seeds 1–4 in the suite; `BLE_HOSTILE_SEEDS=n` runs seeds 1...n, `=a-b` seeds
    /// a...b (`Scripts/test.sh` runs 5–64 after the suite, with the seeded filter).
    public static let fromEnvironment: [UInt64] = {
        let bounds = (ProcessInfo.processInfo.environment["BLE_HOSTILE_SEEDS"] ?? "4").split(separator: "-").compactMap { UInt64($0) }
        guard let last = bounds.last, let first = bounds.count == 2 ? bounds.first : 1, first >= 1, first <= last else { return [1, 2, 3, 4] }
        return Array(first...last)
    }()
}
