// What protects a link: encryption, how the key was made, its size (Vol 3, Part H,
// §2.3.5; Vol 3, Part C, §10.2). The Security Manager (SMP) keeps each link's state;
// L2CAP checks it against an SPSM's requirement before a channel opens.

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
public enum SecurityLevel: Int, Hashable, Sendable, Codable, Comparable, CaseIterable, CustomStringConvertible {
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

/// What an SPSM asks of a link before a channel to it opens (Vol 3, Part C, §10.2;
/// the refusals are Part A §4.23's and §4.26's results).
public struct ChannelSecurity: Hashable, Sendable, CustomStringConvertible {
    /// The least LE security mode 1 level the link must have.
    public var level: SecurityLevel
    /// The least encryption key size, in octets, when `level` asks for encryption.
    public var minimumKeySize: Int

    public init(level: SecurityLevel = .none, minimumKeySize: Int = 7) {
        self.level = level
        self.minimumKeySize = minimumKeySize
    }

    /// Any link will do.
    public static let none = ChannelSecurity()

    /// Why a link with `link`'s security is refused, or nil when it is good enough
    /// (Vol 3, Part C, §10.3.1, as Zephyr answers and the GATT server does). An
    /// unencrypted link gets "insufficient encryption" when a long-term key for it is
    /// stored (`keyAvailable`: the peer encrypts with it and asks again) and
    /// "insufficient authentication" when there is none (the peer must pair); an
    /// encrypted one with a short key "encryption key size too short"; one whose key
    /// is not authenticated (or not from Secure Connections) enough "insufficient
    /// authentication".
    public func refusal(for link: LinkSecurityState, keyAvailable: Bool = false) -> CreditBasedConnectionResult? {
        guard level > .none else { return nil }
        guard link.encrypted else { return keyAvailable ? .insufficientEncryption : .insufficientAuthentication }
        guard link.keySize >= minimumKeySize else { return .encryptionKeySizeTooShort }
        guard link.level >= level else { return .insufficientAuthentication }
        return nil
    }

    public var description: String {
        level == .none ? "none" : "\(level), key size ≥ \(minimumKeySize)"
    }
}
