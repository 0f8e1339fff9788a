// Choosing the pairing method (Vol 3, Part H, §2.3.5.1, Tables 2.6–2.8) and the
// security a finished pairing gives the link.

/// How the two devices authenticate each other.
public enum PairingMethod: Hashable, Sendable, CustomStringConvertible {
    case justWorks
    /// Passkey Entry: which sides type the six digits (the other displays them); both
    /// type when both have only a keyboard.
    case passkeyEntry(initiatorInputs: Bool, responderInputs: Bool)
    /// Secure Connections only: both display six digits and the users confirm they match.
    case numericComparison
    case outOfBand

    /// Whether the method protects against a man in the middle.
    public var authenticated: Bool { self != .justWorks }

    public var description: String {
        switch self {
        case .justWorks: return "Just Works"
        case .passkeyEntry: return "Passkey Entry"
        case .numericComparison: return "Numeric Comparison"
        case .outOfBand: return "OOB"
        }
    }

    /// The method two devices use given both sides' Pairing Request/Response fields
    /// (§2.3.5.1). `secureConnections` is whether both set the SC bit.
    public static func select(initiator: PairingFeatures, responder: PairingFeatures, secureConnections: Bool) -> PairingMethod {
        if secureConnections {
            if initiator.oobDataPresent || responder.oobDataPresent { return .outOfBand }
        } else if initiator.oobDataPresent && responder.oobDataPresent {
            return .outOfBand
        }
        guard initiator.authentication.contains(.mitm) || responder.authentication.contains(.mitm) else { return .justWorks }
        return fromIO(initiator: initiator.ioCapability, responder: responder.ioCapability, secureConnections: secureConnections)
    }

    /// Table 2.8, the IO capability mapping.
    static func fromIO(initiator i: IOCapability, responder r: IOCapability, secureConnections: Bool) -> PairingMethod {
        let known = IOCapability.all
        // Reserved values are refused before this (Invalid Parameters); treat as no IO.
        guard known.contains(i), known.contains(r), i != .noInputNoOutput, r != .noInputNoOutput else { return .justWorks }
        let yesNo: Set<IOCapability> = [.displayYesNo, .keyboardDisplay]
        let keyboard: Set<IOCapability> = [.keyboardOnly, .keyboardDisplay]
        if secureConnections && yesNo.contains(i) && yesNo.contains(r) { return .numericComparison }
        switch (keyboard.contains(i), keyboard.contains(r)) {
        case (false, false):
            return .justWorks
        case (true, false):
            return .passkeyEntry(initiatorInputs: true, responderInputs: false)
        case (false, true):
            return .passkeyEntry(initiatorInputs: false, responderInputs: true)
        case (true, true):
            if i == .keyboardOnly && r == .keyboardOnly { return .passkeyEntry(initiatorInputs: true, responderInputs: true) }
            if i == .keyboardOnly { return .passkeyEntry(initiatorInputs: true, responderInputs: false) }
            if r == .keyboardOnly { return .passkeyEntry(initiatorInputs: false, responderInputs: true) }
            // KeyboardDisplay on both sides (legacy): the initiator displays.
            return .passkeyEntry(initiatorInputs: false, responderInputs: true)
        }
    }
}

/// What protects a link (§2.3.5 and Vol 3, Part C, §10.2 security levels).
public struct LinkSecurityState: Hashable, Sendable, Codable, CustomStringConvertible {
    public var encrypted: Bool
    /// The key came from an MITM-protected pairing (Passkey, Numeric Comparison, OOB).
    public var authenticated: Bool
    /// The key came from LE Secure Connections pairing.
    public var secureConnections: Bool
    /// The encryption key size in octets (0 while unencrypted).
    public var keySize: Int
    /// The key is stored (the link is with a bonded peer).
    public var bonded: Bool

    public init(encrypted: Bool = false, authenticated: Bool = false, secureConnections: Bool = false, keySize: Int = 0, bonded: Bool = false) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.secureConnections = secureConnections
        self.keySize = keySize
        self.bonded = bonded
    }

    /// LE security mode 1 level: 1 none, 2 unauthenticated encryption, 3 authenticated
    /// encryption, 4 authenticated LE Secure Connections with a 16-octet key.
    public var level: SecurityLevel {
        guard encrypted else { return .none }
        guard authenticated else { return .encrypted }
        return secureConnections && keySize == 16 ? .secureConnections : .authenticated
    }

    public var description: String {
        encrypted ? "\(level) (key size \(keySize)\(bonded ? ", bonded" : ""))" : "unencrypted"
    }
}

/// LE security mode 1 levels (Vol 3, Part C, §10.2.1).
public enum SecurityLevel: Int, Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    case none = 1
    case encrypted = 2
    case authenticated = 3
    case secureConnections = 4

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    public var description: String {
        switch self {
        case .none: return "none"
        case .encrypted: return "encrypted"
        case .authenticated: return "authenticated"
        case .secureConnections: return "secure-connections"
        }
    }
}
