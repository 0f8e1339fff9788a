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

