// Security Manager Protocol PDUs (Core Specification v5.4, Vol 3, Part H, §3.3–§3.6):
// every command on the LE Security Manager channel (CID 0x0006), decoded through a
// bounds-checked reader into typed values and encoded back. Keys, randoms and
// confirm values are kept as the PDU carries them (least significant octet first);
// the pairing session reverses them for the crypto toolbox.

import HCI

/// IO capabilities (§3.5.1, Table 3.4).
public struct IOCapability: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let displayOnly = Self(rawValue: 0x00)
    public static let displayYesNo = Self(rawValue: 0x01)
    public static let keyboardOnly = Self(rawValue: 0x02)
    public static let noInputNoOutput = Self(rawValue: 0x03)
    public static let keyboardDisplay = Self(rawValue: 0x04)
    public static let all: [IOCapability] = [.displayOnly, .displayYesNo, .keyboardOnly, .noInputNoOutput, .keyboardDisplay]

    public var description: String {
        switch rawValue {
        case 0x00: return "DisplayOnly"
        case 0x01: return "DisplayYesNo"
        case 0x02: return "KeyboardOnly"
        case 0x03: return "NoInputNoOutput"
        case 0x04: return "KeyboardDisplay"
        default: return "reserved(0x\(hex2(rawValue)))"
        }
    }

    /// The spelling `btctl --io-capability` takes: display-only, display-yes-no,
    /// keyboard-only, no-input-no-output, keyboard-display.
    public init?(argument: String) {
        switch argument.lowercased() {
        case "display-only", "displayonly": self = .displayOnly
        case "display-yes-no", "displayyesno": self = .displayYesNo
        case "keyboard-only", "keyboardonly": self = .keyboardOnly
        case "no-input-no-output", "noinputnooutput", "none": self = .noInputNoOutput
        case "keyboard-display", "keyboarddisplay": self = .keyboardDisplay
        default: return nil
        }
    }
}

/// The AuthReq field (§3.5.1, Figure 3.3).
public struct AuthenticationRequirements: OptionSet, Hashable, Sendable, Codable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// Bonding_Flags 0b01: store the keys.
    public static let bonding = Self(rawValue: 0x01)
    public static let mitm = Self(rawValue: 0x04)
    public static let secureConnections = Self(rawValue: 0x08)
    public static let keypress = Self(rawValue: 0x10)
    public static let ct2 = Self(rawValue: 0x20)
}

/// Initiator/Responder Key Distribution fields (§3.6.1).
public struct KeyDistribution: OptionSet, Hashable, Sendable, Codable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// LTK with EDIV/Rand (legacy); ignored under Secure Connections.
    public static let encryptionKey = Self(rawValue: 0x01)
    /// IRK and identity address.
    public static let identityKey = Self(rawValue: 0x02)
    /// CSRK.
    public static let signingKey = Self(rawValue: 0x04)
    /// Derive the BR/EDR link key from the LTK (cross-transport key derivation; set
    /// only with `PairingConfiguration.deriveLinkKey`). No PDU carries it.
    public static let linkKey = Self(rawValue: 0x08)
    public static let all: Self = [.encryptionKey, .identityKey, .signingKey]
}

/// The shared body of Pairing Request and Pairing Response (§3.5.1, §3.5.2).
public struct PairingFeatures: Hashable, Sendable {
    public var ioCapability: IOCapability
    /// OOB data flag: 0x01 when this side has the peer's OOB data.
    public var oobDataPresent: Bool
    public var authentication: AuthenticationRequirements
    /// 7...16.
    public var maximumKeySize: UInt8
    public var initiatorKeys: KeyDistribution
    public var responderKeys: KeyDistribution

    public init(ioCapability: IOCapability, oobDataPresent: Bool = false, authentication: AuthenticationRequirements,
                maximumKeySize: UInt8 = 16, initiatorKeys: KeyDistribution, responderKeys: KeyDistribution) {
        self.ioCapability = ioCapability
        self.oobDataPresent = oobDataPresent
        self.authentication = authentication
        self.maximumKeySize = maximumKeySize
        self.initiatorKeys = initiatorKeys
        self.responderKeys = responderKeys
    }

    init(_ r: inout ByteReader) throws {
        ioCapability = IOCapability(rawValue: try r.readUInt8("IO_Capability"))
        let oob = try r.readUInt8("OOB_Data_Flag")
        authentication = AuthenticationRequirements(rawValue: try r.readUInt8("AuthReq"))
        maximumKeySize = try r.readUInt8("Maximum_Encryption_Key_Size")
        initiatorKeys = KeyDistribution(rawValue: try r.readUInt8("Initiator_Key_Distribution"))
        responderKeys = KeyDistribution(rawValue: try r.readUInt8("Responder_Key_Distribution"))
        oobDataPresent = oob == 0x01
        // Reserved values are the peer's error; the session answers Invalid Parameters.
        if oob > 0x01 { throw DecodeError.invalidValue(what: "OOB_Data_Flag", value: Int(oob)) }
    }

    func encode(into w: inout ByteWriter) {
        w.write(ioCapability.rawValue); w.write(UInt8(oobDataPresent ? 1 : 0)); w.write(authentication.rawValue)
        w.write(maximumKeySize); w.write(initiatorKeys.rawValue); w.write(responderKeys.rawValue)
    }
}

/// Pairing Failed reasons (§3.5.5, Table 3.7).
public struct PairingFailureReason: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let passkeyEntryFailed = Self(rawValue: 0x01)
    public static let oobNotAvailable = Self(rawValue: 0x02)
    public static let authenticationRequirements = Self(rawValue: 0x03)
    public static let confirmValueFailed = Self(rawValue: 0x04)
    public static let pairingNotSupported = Self(rawValue: 0x05)
    public static let encryptionKeySize = Self(rawValue: 0x06)
    public static let commandNotSupported = Self(rawValue: 0x07)
    public static let unspecifiedReason = Self(rawValue: 0x08)
    public static let repeatedAttempts = Self(rawValue: 0x09)
    public static let invalidParameters = Self(rawValue: 0x0A)
    public static let dhKeyCheckFailed = Self(rawValue: 0x0B)
    public static let numericComparisonFailed = Self(rawValue: 0x0C)
    public static let brEdrPairingInProgress = Self(rawValue: 0x0D)
    public static let crossTransportKeyDerivationNotAllowed = Self(rawValue: 0x0E)
    public static let keyRejected = Self(rawValue: 0x0F)

    public var description: String {
        let names = ["passkey entry failed", "OOB not available", "authentication requirements", "confirm value failed",
                     "pairing not supported", "encryption key size", "command not supported", "unspecified reason",
                     "repeated attempts", "invalid parameters", "DHKey check failed", "numeric comparison failed",
                     "BR/EDR pairing in progress", "cross-transport key derivation not allowed", "key rejected"]
        let i = Int(rawValue) - 1
        return names.indices.contains(i) ? names[i] : "reserved(0x\(hex2(rawValue)))"
    }
}

/// Keypress Notification types (§3.5.8).
public struct KeypressType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let entryStarted = Self(rawValue: 0)
    public static let digitEntered = Self(rawValue: 1)
    public static let digitErased = Self(rawValue: 2)
    public static let cleared = Self(rawValue: 3)
    public static let entryCompleted = Self(rawValue: 4)
    public var description: String {
        ["entry started", "digit entered", "digit erased", "cleared", "entry completed"].indices.contains(Int(rawValue))
            ? ["entry started", "digit entered", "digit erased", "cleared", "entry completed"][Int(rawValue)]
            : "reserved(\(rawValue))"
    }
}

/// SMP command codes (§3.3, Table 3.3).
public enum SMPCode: UInt8, Sendable, CaseIterable {
    case pairingRequest = 0x01, pairingResponse, pairingConfirm, pairingRandom, pairingFailed
    case encryptionInformation, centralIdentification, identityInformation, identityAddressInformation
    case signingInformation, securityRequest, pairingPublicKey, pairingDHKeyCheck, keypressNotification

    public var name: String {
        switch self {
        case .pairingRequest: return "Pairing Request"
        case .pairingResponse: return "Pairing Response"
        case .pairingConfirm: return "Pairing Confirm"
        case .pairingRandom: return "Pairing Random"
        case .pairingFailed: return "Pairing Failed"
        case .encryptionInformation: return "Encryption Information"
        case .centralIdentification: return "Central Identification"
        case .identityInformation: return "Identity Information"
        case .identityAddressInformation: return "Identity Address Information"
        case .signingInformation: return "Signing Information"
        case .securityRequest: return "Security Request"
        case .pairingPublicKey: return "Pairing Public Key"
        case .pairingDHKeyCheck: return "Pairing DHKey Check"
        case .keypressNotification: return "Keypress Notification"
        }
    }
}

/// One SMP command. 16-octet values are in PDU order (least significant first).
public enum SMPPDU: Hashable, Sendable {
    case pairingRequest(PairingFeatures)
    case pairingResponse(PairingFeatures)
    case pairingConfirm([UInt8])
    case pairingRandom([UInt8])
    case pairingFailed(PairingFailureReason)
    case encryptionInformation(longTermKey: [UInt8])
    case centralIdentification(ediv: UInt16, rand: UInt64)
    case identityInformation(irk: [UInt8])
    case identityAddressInformation(type: AddressType, address: BluetoothAddress)
    case signingInformation(csrk: [UInt8])
    case securityRequest(AuthenticationRequirements)
    /// X and Y, 32 octets each, least significant first.
    case pairingPublicKey(x: [UInt8], y: [UInt8])
    case pairingDHKeyCheck([UInt8])
    case keypressNotification(KeypressType)

    public var code: SMPCode {
        switch self {
        case .pairingRequest: return .pairingRequest
        case .pairingResponse: return .pairingResponse
        case .pairingConfirm: return .pairingConfirm
        case .pairingRandom: return .pairingRandom
        case .pairingFailed: return .pairingFailed
        case .encryptionInformation: return .encryptionInformation
        case .centralIdentification: return .centralIdentification
        case .identityInformation: return .identityInformation
        case .identityAddressInformation: return .identityAddressInformation
        case .signingInformation: return .signingInformation
        case .securityRequest: return .securityRequest
        case .pairingPublicKey: return .pairingPublicKey
        case .pairingDHKeyCheck: return .pairingDHKeyCheck
        case .keypressNotification: return .keypressNotification
        }
    }

    /// Decodes one SMP command. Unknown codes, short or long PDUs and reserved
    /// values throw `SMPDecodeError` (the session answers with Pairing Failed:
    /// Command Not Supported or Invalid Parameters, §3.3).
    public init(_ bytes: [UInt8]) throws {
        var r = ByteReader(bytes, context: "SMP")
        let raw = try r.readUInt8("Code")
        guard let code = SMPCode(rawValue: raw) else { throw SMPDecodeError.unknownCode(raw) }
        do {
            switch code {
            case .pairingRequest: self = .pairingRequest(try PairingFeatures(&r))
            case .pairingResponse: self = .pairingResponse(try PairingFeatures(&r))
            case .pairingConfirm: self = .pairingConfirm(try r.readBytes(16, "Confirm_Value"))
            case .pairingRandom: self = .pairingRandom(try r.readBytes(16, "Random_Value"))
            case .pairingFailed: self = .pairingFailed(PairingFailureReason(rawValue: try r.readUInt8("Reason")))
            case .encryptionInformation: self = .encryptionInformation(longTermKey: try r.readBytes(16, "Long_Term_Key"))
            case .centralIdentification:
                let ediv = try r.readUInt16("EDIV")
                self = .centralIdentification(ediv: ediv, rand: try r.readUInt64("Rand"))
            case .identityInformation: self = .identityInformation(irk: try r.readBytes(16, "Identity_Resolving_Key"))
            case .identityAddressInformation:
                let type = try r.readUInt8("AddrType")
                guard type <= 1 else { throw DecodeError.invalidValue(what: "AddrType", value: Int(type)) }
                self = .identityAddressInformation(type: AddressType(rawValue: type), address: try BluetoothAddress(from: &r))
            case .signingInformation: self = .signingInformation(csrk: try r.readBytes(16, "Signature_Key"))
            case .securityRequest: self = .securityRequest(AuthenticationRequirements(rawValue: try r.readUInt8("AuthReq")))
            case .pairingPublicKey:
                let x = try r.readBytes(32, "Public_Key_X")
                self = .pairingPublicKey(x: x, y: try r.readBytes(32, "Public_Key_Y"))
            case .pairingDHKeyCheck: self = .pairingDHKeyCheck(try r.readBytes(16, "DHKey_Check"))
            case .keypressNotification:
                let t = try r.readUInt8("Notification_Type")
                guard t <= 4 else { throw DecodeError.invalidValue(what: "Notification_Type", value: Int(t)) }
                self = .keypressNotification(KeypressType(rawValue: t))
            }
            try r.expectEnd()
        } catch let e as DecodeError {
            throw SMPDecodeError.malformed(code, e)
        }
    }

    public var bytes: [UInt8] {
        var w = ByteWriter(capacity: 65)
        w.write(code.rawValue)
        switch self {
        case let .pairingRequest(f), let .pairingResponse(f): f.encode(into: &w)
        case let .pairingConfirm(v), let .pairingRandom(v), let .pairingDHKeyCheck(v): w.write(contentsOf: v)
        case let .pairingFailed(reason): w.write(reason.rawValue)
        case let .encryptionInformation(k), let .identityInformation(k), let .signingInformation(k): w.write(contentsOf: k)
        case let .centralIdentification(ediv, rand): w.write(ediv); w.write(rand)
        case let .identityAddressInformation(type, address): w.write(type.rawValue); address.encode(into: &w)
        case let .securityRequest(a): w.write(a.rawValue)
        case let .pairingPublicKey(x, y): w.write(contentsOf: x); w.write(contentsOf: y)
        case let .keypressNotification(t): w.write(t.rawValue)
        }
        return w.bytes
    }
}

public enum SMPDecodeError: Error, Hashable, Sendable, CustomStringConvertible {
    case unknownCode(UInt8)
    case malformed(SMPCode, DecodeError)

    /// The Pairing Failed reason the spec gives for this PDU (§3.3: an unknown code is
    /// Command Not Supported; a wrong length or reserved value, Invalid Parameters).
    public var reason: PairingFailureReason {
        switch self {
        case .unknownCode: return .commandNotSupported
        case .malformed: return .invalidParameters
        }
    }

    public var description: String {
        switch self {
        case let .unknownCode(c): return "unknown SMP code 0x\(hex2(c))"
        case let .malformed(code, e): return "malformed \(code.name): \(e)"
        }
    }
}
