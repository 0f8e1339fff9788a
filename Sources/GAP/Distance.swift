// RSSI smoothing and a path-loss distance estimate.
//
// Model (log-distance path loss): RSSI(d) = P₁ − 10·n·log10(d / 1 m), so
// d = 10^((P₁ − RSSI) / (10·n)), where P₁ is the RSSI expected at 1 m and n the
// path-loss exponent (2 in free space; 2.5–4 indoors). P₁ comes from a beacon's
// calibrated "measured power" when there is one, else from the advertised TX Power
// Level (power at 0 m) minus 41 dB — the free-space loss at 1 m at 2.44 GHz
// (20·log10(4π·1 m / 0.1229 m) ≈ 40.2 dB, rounded the way beacon vendors calibrate).
//
// Error: RSSI at a fixed distance varies by ±5–10 dB indoors (multipath, bodies,
// antenna orientation); with n = 2 every 6 dB is a factor 2 in distance, so a single
// reading is good to roughly ×0.5–×2 at best. Smoothing narrows the noise, not the
// bias: treat the result as near / medium / far, not as metres.

import Foundation

/// Exponentially weighted moving average of RSSI readings.
public struct RSSIFilter: Sendable, Hashable {
    /// Weight of each new reading, 0 < alpha ≤ 1 (1 = no smoothing).
    public var alpha: Double
    public private(set) var value: Double?
    public private(set) var count = 0

    public init(alpha: Double = 0.25) { self.alpha = Swift.min(1, Swift.max(0.01, alpha)) }

    /// Adds a reading (127, "not available", is ignored) and returns the smoothed value.
    @discardableResult
    public mutating func add(_ rssi: Int8) -> Double? {
        guard rssi != 127 else { return value }
        count += 1
        value = value.map { $0 + alpha * (Double(rssi) - $0) } ?? Double(rssi)
        return value
    }
}

public enum DistanceEstimate {
    /// Free-space loss at 1 m subtracted from a TX Power Level (power at 0 m).
    public static let oneMetreLoss = 41.0

    /// Metres for `rssi` given the power expected at 1 m (`rssiAtOneMetre`).
    public static func metres(rssi: Double, rssiAtOneMetre: Double, pathLossExponent n: Double = 2) -> Double {
        pow(10, (rssiAtOneMetre - rssi) / (10 * Swift.max(0.5, n)))
    }

    /// Metres from an advertised TX Power Level (dBm at 0 m).
    public static func metres(rssi: Double, txPowerLevel: Int8, pathLossExponent n: Double = 2) -> Double {
        metres(rssi: rssi, rssiAtOneMetre: Double(txPowerLevel) - oneMetreLoss, pathLossExponent: n)
    }

    public enum Proximity: String, Sendable { case immediate, near, far }

    /// The iBeacon-style zone: immediate < 0.5 m, near < 3 m, far beyond.
    public static func proximity(metres: Double) -> Proximity {
        metres < 0.5 ? .immediate : metres < 3 ? .near : .far
    }
}
