// The seeded source of the hostile tests' random choices (a peer, a controller, a host
// that lies): the same seed, the same lies, so a failure names its seed and replays.

import Foundation
import SMP

/// Every random choice of a seeded hostile test (SplitMix64 through `SecurityRandom`):
/// the same seed, the same choices.
public struct SeededGenerator: RandomNumberGenerator {
    public let source: SecurityRandom
    public init(_ seed: UInt64) { source = .seeded(seed) }
    public mutating func next() -> UInt64 { source.uint64() }

    public mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &self) < p }
    public mutating func pick<T>(_ options: [T]) -> T { options.randomElement(using: &self)! }
    public mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8.random(in: .min ... .max, using: &self) } }
    public mutating func byte() -> UInt8 { UInt8.random(in: .min ... .max, using: &self) }
    public mutating func count(upTo n: Int) -> Int { Int.random(in: 0...n, using: &self) }

    /// Seeds 1–4 in the suite; `BLE_HOSTILE_SEEDS=n` runs seeds 1...n, `=a-b` seeds
    /// a...b (`Scripts/test.sh` runs 5–64 after the suite, with the seeded filter).
    public static let seeds: [UInt64] = {
        let bounds = (ProcessInfo.processInfo.environment["BLE_HOSTILE_SEEDS"] ?? "4").split(separator: "-").compactMap { UInt64($0) }
        guard let last = bounds.last, let first = bounds.count == 2 ? bounds.first : 1, first >= 1, first <= last else { return [1, 2, 3, 4] }
        return Array(first...last)
    }()
}
