package v1alpha1

// The shared infrastructure a MemoryStore is provisioned in. A platform team declares it
// once as a ClusterMemoryBackend (Secrets in the operator's namespace, so tenants never see
// admin credentials), or a single team writes it inline in the MemoryStore (Secrets in the
// store's own namespace).

// BackendSpec describes the shared backends: PostgreSQL (always), Milvus and object storage.
type BackendSpec struct {
	// Postgres is the system of record: each store gets a schema and a role of its own.
	Postgres PostgresSpec `json:"postgres"`

	// Milvus is a Milvus server for stores whose engine is Milvus (the default engine
	// of stores on this backend when it is declared and vectorEngine is not).
	// +optional
	Milvus *MilvusSpec `json:"milvus,omitempty"`

	// VectorEngine is the engine of the stores on this backend that name none in
	// spec.vector.engine. Unset: Milvus when milvus is declared, else Postgres.
	// +optional
	VectorEngine VectorEngine `json:"vectorEngine,omitempty"`

	// ObjectStorage is the S3-compatible store for snapshots and cold archives.
	// +optional
	ObjectStorage *ObjectStorageSpec `json:"objectStorage,omitempty"`

	// Redis keeps the short-term tier (sessions) of the stores on this backend whose
	// spec.shortTerm.store is Redis, or names none.
	// +optional
	Redis *RedisSpec `json:"redis,omitempty"`
}

// RedisSpec is a Redis server (7.0 or later, ACLs on) for stores' short-term tier.
type RedisSpec struct {
	// Address as host:port.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+:[0-9]{1,5}$`
	Address string `json:"address"`

	// CredentialsSecret holds a login allowed to manage ACL users (ACL SETUSER,
	// DELUSER) and to delete a store's keys. The operator uses it only to create
	// each store's own Redis user, limited to the keys mem:<tenant>:* and the
	// commands the short-term tier runs; the gateway logs in as that user.
	CredentialsSecret CredentialsSecretRef `json:"credentialsSecret"`
}

// PostgresSpec is a PostgreSQL server and an administrative login on it.
type PostgresSpec struct {
	// Host name or IP address of the server.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`

	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Database in which store schemas are created.
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]{0,62}$`
	// +optional
	Database string `json:"database,omitempty"`

	// SSLMode as understood by libpq.
	// +kubebuilder:default=prefer
	// +kubebuilder:validation:Enum=disable;allow;prefer;require;verify-ca;verify-full
	// +optional
	SSLMode string `json:"sslMode,omitempty"`

	// AdminSecret holds a login allowed to create schemas and roles (CREATEROLE).
	// It is used only by the operator and never copied to a tenant.
	AdminSecret CredentialsSecretRef `json:"adminSecret"`
}

// MilvusSpec is a Milvus server (or Milvus Lite) reached over gRPC.
type MilvusSpec struct {
	// Address as host:port.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+:[0-9]{1,5}$`
	Address string `json:"address"`

	// CredentialsSecret holds the server's admin login when authentication is enabled
	// (every production Milvus). The operator uses it only to create each store's own
	// Milvus user and role, with privileges on the store's collection alone; the
	// gateway and the Jobs log in as that user. Unset means the server has no
	// authentication (Milvus Lite).
	// +optional
	CredentialsSecret *CredentialsSecretRef `json:"credentialsSecret,omitempty"`
}

// ObjectStorageSpec is an S3-compatible endpoint (MinIO, AWS S3, Ceph RGW) and bucket.
type ObjectStorageSpec struct {
	// Endpoint as host[:port], without scheme.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	Endpoint string `json:"endpoint"`

	// Bucket that holds every store's prefix.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Region of the bucket, when the endpoint needs one.
	// +optional
	Region string `json:"region,omitempty"`

	// Insecure uses plain HTTP instead of HTTPS.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// CreateBucket lets the operator create the bucket when it does not exist.
	// +optional
	CreateBucket bool `json:"createBucket,omitempty"`

	// Prefix under which each store gets "<prefix>/<tenant>/".
	// +kubebuilder:default=memory-operator
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// CredentialsSecret holds the access key and the secret key.
	CredentialsSecret ObjectStorageCredentials `json:"credentialsSecret"`
}

// CredentialsSecretRef names a Secret holding a username and a password.
type CredentialsSecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// +kubebuilder:default=username
	// +optional
	UsernameKey string `json:"usernameKey,omitempty"`

	// +kubebuilder:default=password
	// +optional
	PasswordKey string `json:"passwordKey,omitempty"`
}

// ObjectStorageCredentials names a Secret with S3 access keys.
type ObjectStorageCredentials struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// +kubebuilder:default=accessKeyID
	// +optional
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`

	// +kubebuilder:default=secretAccessKey
	// +optional
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}
